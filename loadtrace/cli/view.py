"""``loadtrace view DIR``: what to run to see DIR's trace files in Jaeger, with Docker or without.

With Docker: the Docker Compose command over the compose file loadtrace ships (an OpenTelemetry Collector in front of
Jaeger v2, docker-compose.yml), DIR as an absolute path so it runs from any folder.

Without (no ``docker`` on PATH, or no daemon it could reach): the same two programs as binaries, as
``scripts/build_backends.sh`` builds them (``jaeger``, ``otelcol-loadtrace``), started on this host with the same
configs and ``--set`` overrides for what compose's network did: every port on the loopback and named (``Ports``):
Jaeger's OTLP receivers and health check moved off the collector's, both programs' own metrics off (each would bind
8888), the collector's exporter pointed at Jaeger's moved receiver and its replay receiver at DIR. The script waits
until each program says in its own log that it is ready, its process still alive: a port's answer may come from
another user's Jaeger. ``binaries_script`` is the one place these commands are written: ``loadtrace view`` prints it,
docs/jaeger.md shows it (scripts/gen_docs.py) and tests/backends/test_view_without_docker.py runs it.

Both are shell scripts: ``loadtrace view DIR | sh``.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

JAEGER, COLLECTOR = "jaeger", "otelcol-loadtrace"  # the binaries scripts/build_backends.sh writes
BACKENDS_BIN = "LOADTRACE_BACKENDS_BIN"  # where it writes them (default: the clone's .backends/bin)
# A built jaeger-ui (its index.html's folder): Jaeger built from its Go module carries no UI, only the query API;
# Jaeger's release binaries and images carry it. ``--jaeger-ui DIR``, else this variable.
JAEGER_UI = "LOADTRACE_JAEGER_UI"
READY = "Everything is ready"  # what both programs log once every component has started (the collector's service)


@dataclass(frozen=True)
class Ports:
    """Every port the two programs bind on this host, all on 127.0.0.1."""

    otlp_grpc: int = 4317  # the collector's OTLP receivers: jobs send here, as to docker-compose.yml's
    otlp_http: int = 4318
    health: int = 13133  # the collector's health check
    ui: int = 16686  # Jaeger's UI and query API (/api/v3): what `loadtrace report --jaeger` reads
    query_grpc: int = 16685  # Jaeger's query API over gRPC
    jaeger_otlp_grpc: int = 14317  # Jaeger's OTLP receivers: the collector sends here
    jaeger_otlp_http: int = 14318
    jaeger_health: int = 13134  # Jaeger's health check

    def moved(self, offset: int) -> Ports:
        """Every port ``offset`` higher: beside another user's backends on one host."""
        return Ports(*(getattr(self, field.name) + offset for field in dataclasses.fields(self)))


def docker_usable() -> bool:
    """Whether ``docker`` is on PATH with a daemon it could reach: ``DOCKER_HOST`` set, or the usual sockets there."""
    if shutil.which("docker") is None:
        return False
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    sockets = ["/var/run/docker.sock", *([os.path.join(runtime, "docker.sock")] if runtime else [])]
    return bool(os.environ.get("DOCKER_HOST")) or any(os.path.exists(path) for path in sockets)


SOURCE_TREE = Path(__file__).resolve().parents[2]  # a clone's root, where loadtrace runs from its source tree


def binaries(source_tree: Path = SOURCE_TREE) -> tuple[Path, Path] | None:
    """The built Jaeger and collector: in ``$LOADTRACE_BACKENDS_BIN``, else a clone's ``.backends/bin`` (loadtrace run
    from its source tree, ``source_tree``), else on PATH; None where they are not."""
    for folder in (os.environ.get(BACKENDS_BIN), source_tree / ".backends" / "bin"):
        if folder and all(os.access(Path(folder, name), os.X_OK) for name in (JAEGER, COLLECTOR)):
            return Path(folder, JAEGER).absolute(), Path(folder, COLLECTOR).absolute()
    found = shutil.which(JAEGER), shutil.which(COLLECTOR)
    return (Path(found[0]), Path(found[1])) if found[0] and found[1] else None


def run_dir() -> Path:
    """Where the script keeps the two programs' logs and pids: this user's own folder in the temporary directory."""
    return Path(tempfile.gettempdir()) / f"loadtrace-view-{os.geteuid()}"


def compose_lines(folder: str, compose: Path) -> list[str]:
    docker = f"docker compose -p loadtrace -f {shlex.quote(str(compose))}"
    env = f"LOADTRACE_DIR={shlex.quote(folder)} LOADTRACE_UID={os.getuid()} LOADTRACE_GID={os.getgid()}"
    return [
        f"# Replay every *.jsonl under {folder} into Jaeger (Docker; with docker-compose, the same arguments):",
        f"{env} {docker} up -d",
        "# Then open http://localhost:16686 (service loadtrace; a Lookback that covers when the job ran), or:",
        "#   loadtrace report --jaeger http://localhost:16686 --latest --since 30d",
        f"# Stop (drops every trace: storage is in memory): {docker} down",
    ]


def _overrides(pairs: dict[str, str]) -> list[str]:
    return [shlex.quote(f"--set={key}={value}") for key, value in pairs.items()]


def _started(program: str, config: str, overrides: list[str], log: str) -> list[str]:
    """The command that starts ``program`` in the background, an override a line, its output in ``$RUN/<log>.log``,
    its pid beside."""
    return [
        f'"${program}" --config "$CONFIGS/{config}" \\',
        *(f"  {word} \\" for word in overrides),
        f'  >"$RUN/{log}.log" 2>&1 &',
        f'echo $! >"$RUN/{log}.pid"',
    ]


def binaries_script(
    folder: str,
    found: tuple[Path, Path] | None,
    configs: Path,
    run: Path,
    ports: Ports,
    ui: Path | None = None,
) -> list[str]:
    """The shell script that starts Jaeger and the collector as binaries on this host (the module docstring); ``ui``:
    a built jaeger-ui for Jaeger to serve (None: its query API alone, and the script says where a UI comes from)."""
    loopback = "127.0.0.1"
    jaeger_set = {
        "receivers.otlp.protocols.grpc.endpoint": f"{loopback}:{ports.jaeger_otlp_grpc}",
        "receivers.otlp.protocols.http.endpoint": f"{loopback}:{ports.jaeger_otlp_http}",
        "extensions.healthcheckv2.http.endpoint": f"{loopback}:{ports.jaeger_health}",
        "extensions.jaeger_query.http.endpoint": f"{loopback}:{ports.ui}",
        "extensions.jaeger_query.grpc.endpoint": f"{loopback}:{ports.query_grpc}",
        "service.telemetry.metrics.level": "none",
    }
    if ui is not None:
        jaeger_set["extensions.jaeger_query.ui.assets_path"] = str(ui)
    jaeger = _overrides(jaeger_set)
    collector = _overrides(
        {
            "receivers.otlp.protocols.grpc.endpoint": f"{loopback}:{ports.otlp_grpc}",
            "receivers.otlp.protocols.http.endpoint": f"{loopback}:{ports.otlp_http}",
            "extensions.health_check.endpoint": f"{loopback}:{ports.health}",
            "exporters.otlp/jaeger.endpoint": f"{loopback}:{ports.jaeger_otlp_grpc}",
            "receivers.otlpjsonfile.include": f"[{folder}/**/*.jsonl]",
            "service.telemetry.metrics.level": "none",
        }
    )
    jaeger_bin, collector_bin = found if found is not None else (Path(JAEGER), Path(COLLECTOR))
    return [
        *_header(folder, found is not None, ports),
        f"JAEGER={shlex.quote(str(jaeger_bin))}",
        f"COLLECTOR={shlex.quote(str(collector_bin))}",
        f"CONFIGS={shlex.quote(str(configs))}",
        f"RUN={shlex.quote(str(run))}",
        'mkdir -p -m 700 "$RUN"',
        *_started("JAEGER", "jaeger.yaml", jaeger, "jaeger"),
        *_started("COLLECTOR", "collector.yaml", collector, "collector"),
        "# Ready when each says so in its own log, still running (an answer on a port may be another user's Jaeger):",
        "for name in jaeger collector; do",
        f'  until grep -q "{READY}" "$RUN/$name.log"; do',
        '    kill -0 "$(cat "$RUN/$name.pid")" 2>/dev/null ||',
        '      { echo "$name stopped:"; tail -n 5 "$RUN/$name.log"; exit 1; }',
        "    sleep 0.5",
        "  done",
        "done",
        *_opened(ports, ui),
        f'echo "Jobs send here: OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:{ports.otlp_http}"',
        f'echo "loadtrace report --jaeger http://localhost:{ports.ui} --latest --since 30d"',
        'echo "Stop both (drops every trace: storage is in memory):"',
        'echo "  kill $(cat "$RUN/jaeger.pid") $(cat "$RUN/collector.pid")"',
    ]


def _opened(ports: Ports, ui: Path | None) -> list[str]:
    """Where a person opens Jaeger: its UI where one is served, else its query API and where a UI comes from."""
    at = f"http://localhost:{ports.ui}"
    if ui is not None:
        return [f'echo "Jaeger: {at} (service loadtrace; a Lookback that covers when the job ran)"']
    return [
        f'echo "Jaeger: {at}/api/v3, its query API (built from its Go module, Jaeger serves no UI: give"',
        'echo "  loadtrace view --jaeger-ui DIR, a built jaeger-ui, or run Jaeger\'s release binary, which has it)"',
    ]


def _header(folder: str, found: bool, ports: Ports) -> list[str]:
    """What the script does, and every port it takes."""
    loopback = "127.0.0.1"
    lines = [
        "# Without Docker: Jaeger v2.12.0 and the OpenTelemetry Collector 0.139.0 as scripts/build_backends.sh builds",
        "# them, with the configs loadtrace ships, on this host; the collector replays every *.jsonl under",
        f"#   {folder}",
        f"# Every port, all on {loopback} (one another program holds stops the binary that needs it; this says so):",
        f"#   collector: {ports.otlp_grpc} OTLP gRPC, {ports.otlp_http} OTLP HTTP (jobs send here),"
        f" {ports.health} health",
        f"#   jaeger:    {ports.ui} UI and /api/v3, {ports.query_grpc} query gRPC, {ports.jaeger_otlp_grpc} and"
        f" {ports.jaeger_otlp_http} OTLP (from the collector), {ports.jaeger_health} health",
        "#   their own metrics (8888 for each by default): off",
    ]
    if not found:
        lines += [
            f"# No {JAEGER} and {COLLECTOR} found (${BACKENDS_BIN}, a clone's .backends/bin, PATH): build them",
            f"# in a loadtrace clone, `bash scripts/build_backends.sh` (Go needed), and set {BACKENDS_BIN} to that",
            "# clone's .backends/bin, or put them on PATH.",
        ]
    return lines
