"""Promise (docs/report.md, ClickHouse): ``loadtrace ingest`` writes the ``otel_traces`` table as the collector's
clickhouse exporter writes it, in the release scripts/build_backends.sh builds (scripts/backends/otelcol/go.mod): its
DDL is that release's template rendered with the defaults, and its SpanKind and StatusCode are spelled as that
release spells them (pdata's ``String()``: ``Internal``, ``Error``). No ClickHouse server runs here, so the exporter's
own source, which the build left in Go's module cache, is what the port is held to.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import backends
from support.paths import REPO

from loadtrace.analysis.sources import clickhouse, otel_traces

GO_MOD = REPO / "scripts" / "backends" / "otelcol" / "go.mod"


def module(name: str) -> Path:
    """The module's folder in Go's module cache, at the version go.mod requires."""
    backends.require()
    if shutil.which("go") is None:
        pytest.skip("no Go: the exporter's source is in Go's module cache, which scripts/build_backends.sh fills")
    version = re.search(rf"^\s*{re.escape(name)} (v\S+)", GO_MOD.read_text(), re.M)
    assert version, name
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, timeout=60).stdout.strip()
    folder = Path(cache) / f"{name}@{version[1]}"
    if not folder.is_dir():
        pytest.skip(f"{folder} not in Go's module cache: `bash scripts/build_backends.sh` fetches it")
    return folder


def words(sql: str) -> list[str]:
    return re.sub(r"([(),])", r" \1 ", sql).split()


def test_the_ddl_is_the_built_exporters():
    exporter = module("github.com/open-telemetry/opentelemetry-collector-contrib/exporter/clickhouseexporter")
    template = (exporter / "internal" / "sqltemplates" / "traces_table.sql").read_text()
    # As the exporter renders it by default: database.table, no ON CLUSTER, MergeTree(), no TTL.
    rendered = template.replace('"%s"."%s" %s', "default.otel_traces", 1).replace("ENGINE = %s", "ENGINE = MergeTree()")
    rendered = rendered.replace("\n%s\n", "\n", 1)
    assert "%" not in rendered, rendered
    assert words(otel_traces.DDL.format(database="default", table="otel_traces")) == words(rendered)


def test_kind_and_status_are_spelled_as_the_built_exporter_spells_them():
    exporter = module("github.com/open-telemetry/opentelemetry-collector-contrib/exporter/clickhouseexporter")
    appended = (exporter / "exporter_traces.go").read_text()
    assert "span.Kind().String()," in appended and "spanStatus.Code().String()," in appended
    pdata = module("go.opentelemetry.io/collector/pdata")

    def spelled(path: str) -> tuple[str, ...]:
        return tuple(re.findall(r'return "(\w+)"', (pdata / "ptrace" / path).read_text()))

    assert otel_traces.SPAN_KINDS == spelled("span_kind.go")
    assert otel_traces.STATUS_CODES == spelled("status_code.go")
    assert {clickhouse.STATUS_CODES[code] for code in otel_traces.STATUS_CODES} == {0, 1, 2}
