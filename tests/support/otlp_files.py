"""Reading back the OTLP JSON Lines files loadtrace wrote, as plain dicts: (resource attributes, span) pairs."""

from __future__ import annotations

import json
from pathlib import Path


def read_lines(path: Path) -> list[tuple[dict, dict]]:
    """(resource attributes, span) of every span in an OTLP JSON Lines file; attribute values unwrapped."""

    def unwrap(attributes: list[dict]) -> dict:
        return {a["key"]: next(iter(a["value"].values())) for a in attributes}

    found = []
    for line in path.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            resource = unwrap(resource_spans["resource"]["attributes"])
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    found.append((resource, {**span, "attributes": unwrap(span.get("attributes", []))}))
    return found
