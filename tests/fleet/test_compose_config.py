"""The promise: `docker compose up` gives a working collector -> Jaeger path, and the configs in exporters/ load.

No Docker engine is needed. Debian's docker-compose validates the compose file without one (`config -q`); everything
else is checked structurally with PyYAML against what the two pinned images ship:

- every component a pipeline names is defined, and every defined component is used;
- every component type (the part before `/`) is one the pinned image ships, and its keys are ones it accepts;
- the ports compose publishes are the ports the receivers and the UI listen on, the collector's exporter reaches
  Jaeger's receiver, the files compose mounts exist and are the ones the images are told to load.

The allow-lists below were read from upstream source for the pinned releases; a test fails when an image tag changes,
so that they are checked again rather than trusted:

- otel/opentelemetry-collector-contrib: the distribution manifest,
  github.com/open-telemetry/opentelemetry-collector-releases distributions/otelcol-contrib/manifest.yaml (read at
  0.135.0; the pins are now 0.139.0, the release tests/backends/ builds and loads these configs with),
  component keys from each component's config.go / config.schema.yaml / README in opentelemetry-collector(-contrib)
  (receiver/otlpjsonfilereceiver, pkg/stanza/fileconsumer, processor/memorylimiterprocessor, processor/batchprocessor,
  processor/groupbytraceprocessor, processor/filterprocessor, processor/deltatocumulativeprocessor,
  exporter/prometheusexporter, extension/healthcheckextension) and the release's _build/schemas.
- jaegertracing/jaeger v2: cmd/jaeger/internal/components.go (the factories the binary registers),
  cmd/jaeger/internal/all-in-one.yaml, cmd/jaeger/config-*.yaml, and the jaegerquery / storageexporter config structs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.paths import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"

EXPORTERS = REPO / "exporters"

COLLECTOR_IMAGE = "otel/opentelemetry-collector-contrib"

COLLECTOR_TAG = "0.139.0"

JAEGER_IMAGE = "jaegertracing/jaeger"

JAEGER_TAG = "2.12.0"

SECTIONS = ("receivers", "processors", "exporters", "connectors", "extensions")

# Component types otelcol-contrib 0.135.0 registers (a tracing-relevant subset of its manifest; add from the manifest,
# not from memory). Newer releases renamed some (otlp exporter -> otlp_grpc, otlphttp -> otlp_http,
# otlpjsonfile -> otlp_json_file) and keep these names as deprecated aliases; the new names are NOT known to 0.135.0.
CONTRIB_COMPONENTS: dict[str, set[str]] = {
    "receivers": {"otlp", "otlpjsonfile", "jaeger", "zipkin", "kafka", "filelog", "hostmetrics", "prometheus", "nop"},
    "processors": {
        "batch",
        "memory_limiter",
        "groupbytrace",
        "tail_sampling",
        "probabilistic_sampler",
        "attributes",
        "resource",
        "resourcedetection",
        "span",
        "filter",
        "transform",
        "redaction",
        "k8sattributes",
        "groupbyattrs",
        "deltatocumulative",
    },
    "exporters": {
        "otlp",
        "otlphttp",
        "debug",
        "nop",
        "file",
        "kafka",
        "loadbalancing",
        "zipkin",
        "elasticsearch",
        "clickhouse",
        "prometheus",
    },
    "connectors": {"forward", "spanmetrics", "servicegraph", "routing", "count", "failover", "roundrobin"},
    "extensions": {
        "health_check",
        "pprof",
        "zpages",
        "file_storage",
        "basicauth",
        "bearertokenauth",
        "headers_setter",
        "oauth2client",
        "oidc",
        "sigv4auth",
    },
}

# Component types Jaeger v2 registers (cmd/jaeger/internal/components.go, the set common to the 2.x releases read).
# Note healthcheckv2 here, health_check in the contrib collector: each image ships only its own.
JAEGER_COMPONENTS: dict[str, set[str]] = {
    "receivers": {"otlp", "jaeger", "zipkin", "kafka", "nop"},
    "processors": {"batch", "memory_limiter", "tail_sampling", "attributes", "adaptive_sampling"},
    "exporters": {"jaeger_storage_exporter", "otlp", "otlphttp", "debug", "nop", "kafka", "prometheus"},
    "connectors": {"forward", "spanmetrics"},
    "extensions": {
        "jaeger_storage",
        "jaeger_query",
        "healthcheckv2",
        "remote_sampling",
        "expvar",
        "zpages",
        "remote_storage",
    },
}

# Keys we have verified per component type (top level). A key outside these sets is not necessarily wrong: check it
# against the component's config struct for the pinned release, then add it here.
GRPC_HTTP_SERVER_KEYS = {
    "endpoint",
    "transport",
    "tls",
    "max_recv_msg_size_mib",
    "max_concurrent_streams",
    "read_buffer_size",
    "write_buffer_size",
    "keepalive",
    "include_metadata",
    "auth",
    "cors",
    "max_request_body_size",
    "traces_url_path",
    "metrics_url_path",
    "logs_url_path",
    "response_headers",
    "compression_algorithms",
}

TLS_CLIENT_KEYS = {
    "insecure",
    "insecure_skip_verify",
    "ca_file",
    "ca_pem",
    "cert_file",
    "cert_pem",
    "key_file",
    "key_pem",
    "server_name_override",
    "min_version",
    "max_version",
    "reload_interval",
    "include_system_ca_certs_pool",
    "cipher_suites",
}

SENDING_QUEUE_KEYS = {
    "enabled",
    "num_consumers",
    "queue_size",
    "storage",
    "blocking",
    "block_on_overflow",
    "sizer",
    "batch",
    "wait_for_result",
}

RETRY_KEYS = {"enabled", "initial_interval", "randomization_factor", "multiplier", "max_interval", "max_elapsed_time"}

BATCH_KEYS = {"timeout", "send_batch_size", "send_batch_max_size", "metadata_keys", "metadata_cardinality_limit"}

OTLP_RECEIVER_KEYS = {"protocols"}

CONTRIB_KEYS: dict[tuple[str, str], set[str]] = {
    ("receivers", "otlp"): OTLP_RECEIVER_KEYS,
    # receiver/otlpjsonfilereceiver: fileconsumer.Config (+ matcher criteria) squashed, plus `storage`.
    ("receivers", "otlpjsonfile"): {
        "include",
        "exclude",
        "exclude_older_than",
        "ordering_criteria",
        "start_at",
        "fingerprint_size",
        "max_log_size",
        "max_concurrent_files",
        "max_batches",
        "poll_interval",
        "encoding",
        "multiline",
        "force_flush_period",
        "include_file_name",
        "include_file_path",
        "include_file_name_resolved",
        "include_file_path_resolved",
        "delete_after_read",
        "header",
        "compression",
        "on_truncate",
        "storage",
    },
    ("processors", "memory_limiter"): {
        "check_interval",
        "limit_mib",
        "spike_limit_mib",
        "limit_percentage",
        "spike_limit_percentage",
    },
    ("processors", "batch"): BATCH_KEYS,
    ("processors", "groupbytrace"): {"wait_duration", "num_traces", "num_workers", "discard_orphans", "store_on_disk"},
    ("exporters", "otlp"): {
        "endpoint",
        "tls",
        "compression",
        "headers",
        "timeout",
        "keepalive",
        "balancer_name",
        "authority",
        "auth",
        "read_buffer_size",
        "write_buffer_size",
        "wait_for_ready",
        "sending_queue",
        "retry_on_failure",
    },
    ("exporters", "debug"): {"verbosity", "sampling_initial", "sampling_thereafter", "use_internal_logger"},
    # exporter/clickhouseexporter config.go: exporterhelper's timeout, queue and retry, and its own keys.
    ("exporters", "clickhouse"): {
        "endpoint",
        "username",
        "password",
        "database",
        "connection_params",
        "logs_table_name",
        "traces_table_name",
        "metrics_table_name",
        "metrics_tables",
        "ttl",
        "table_engine",
        "cluster_name",
        "create_schema",
        "async_insert",
        "timeout",
        "sending_queue",
        "retry_on_failure",
    },
    ("exporters", "nop"): set(),  # exporter/nopexporter: no settings
    # processor/filterprocessor config.go: OTTL conditions per signal (and the legacy include/exclude, not used here).
    ("processors", "filter"): {"error_mode", "metrics", "traces", "logs", "spans"},
    # processor/deltatocumulativeprocessor config.go.
    ("processors", "deltatocumulative"): {"max_stale", "max_streams"},
    # exporter/prometheusexporter config.go: confighttp.ServerConfig squashed (endpoint, tls) and its own keys.
    ("exporters", "prometheus"): {
        "endpoint",
        "tls",
        "namespace",
        "const_labels",
        "send_timestamps",
        "metric_expiration",
        "resource_to_telemetry_conversion",
        "enable_open_metrics",
        "add_metric_suffixes",
    },
    ("extensions", "health_check"): {"endpoint", "path", "response_body", "check_collector_pipeline", "tls"},
}

JAEGER_KEYS: dict[tuple[str, str], set[str]] = {
    ("receivers", "otlp"): OTLP_RECEIVER_KEYS,
    ("processors", "batch"): BATCH_KEYS,
    ("exporters", "jaeger_storage_exporter"): {"trace_storage", "queue", "retry_on_failure"},
    ("extensions", "jaeger_storage"): {"backends", "metric_backends"},
    ("extensions", "jaeger_query"): {
        "storage",
        "base_path",
        "bearer_token_propagation",
        "enable_tracing",
        "grpc",
        "http",
        "max_clock_skew_adjust",
        "multi_tenancy",
        "ui",
    },
    ("extensions", "healthcheckv2"): {"use_v2", "http", "grpc", "component_health", "endpoint", "path"},
}

JAEGER_BACKEND_KINDS = {"memory", "badger", "grpc", "cassandra", "elasticsearch", "opensearch", "clickhouse"}

COLLECTOR_CONFIGS = (
    "collector.yaml",
    "collector-agent.yaml",
    "collector-central.yaml",
    "collector-fleet.yaml",
    "collector-central-clickhouse.yaml",
)

ALL_CONFIGS = (*COLLECTOR_CONFIGS, "jaeger.yaml")

ENV_REF = re.compile(r"\$\{([^}]*)\}")

ENV_REF_OK = re.compile(r"env:[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?")


def load(path: Path) -> Any:
    with path.open() as handle:
        return yaml.safe_load(handle)


def compose() -> dict[str, Any]:
    return load(COMPOSE_FILE)


def config(name: str) -> dict[str, Any]:
    return load(EXPORTERS / name)


def kind(component_id: str) -> str:
    """`otlp/jaeger` -> `otlp`: the type is what the image must ship, the rest is a free-form name."""
    return component_id.split("/", 1)[0]


def expand_env_default(value: str) -> str:
    """`${env:X:-jaeger:4317}` -> `jaeger:4317`; `${env:X}` -> `` (set at run time, nothing to check here)."""
    return ENV_REF.sub(lambda m: m.group(1).split(":-", 1)[1] if ":-" in m.group(1) else "", value)


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def image_and_tag(service: dict[str, Any]) -> tuple[str, str]:
    image, _, tag = service["image"].rpartition(":")
    return image, tag


def published(service: dict[str, Any]) -> dict[int, str]:
    """Container port -> the whole mapping, for short-syntax `ports` ("[ip:]host:container")."""
    out = {}
    for mapping in service.get("ports", []):
        container = str(mapping).split("/", 1)[0].rsplit(":", 1)[-1]
        out[int(container)] = str(mapping)
    return out


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> host path, for short-syntax `volumes` ("host:container[:mode]")."""
    out = {}
    for volume in service.get("volumes", []):
        parts = str(volume).split(":")
        if parts[0].startswith("${"):  # "${VAR:-default}:/target:ro": the host part has a colon of its own
            host, rest = str(volume).split("}:", 1)
            parts = [host + "}", *rest.split(":")]
        out[parts[1]] = parts[0]
    return out


def config_arg(service: dict[str, Any]) -> str:
    """The path the service is told to load with --config (as `--config=PATH` or `--config PATH`; Prometheus's
    `--config.file=PATH`)."""
    command = list(service["command"])
    for i, arg in enumerate(command):
        if arg.startswith(("--config=", "--config.file=")):
            return arg.split("=", 1)[1]
        if arg == "--config":
            return command[i + 1]
    raise AssertionError(f"no --config in {command}")


def mounted_config(service_name: str) -> tuple[str, dict[str, Any]]:
    service = compose()["services"][service_name]
    host = mounts(service)[config_arg(service)]
    return Path(host).name, load(REPO / host)


def test_images_are_pinned_to_the_releases_the_allow_lists_were_read_from():
    services = compose()["services"]
    assert image_and_tag(services["collector"]) == (COLLECTOR_IMAGE, COLLECTOR_TAG), (
        "collector image changed: re-check CONTRIB_COMPONENTS / CONTRIB_KEYS against that release, "
        "then update the tag here"
    )
    assert image_and_tag(services["jaeger"]) == (JAEGER_IMAGE, JAEGER_TAG), (
        "jaeger image changed: re-check JAEGER_COMPONENTS / JAEGER_KEYS against that release, then update the tag here"
    )
    assert re.fullmatch(r"2\.\d+\.\d+", JAEGER_TAG), (
        "the UI and API described in docs/jaeger.md's 'View it in Jaeger' are Jaeger v2's"
    )


def test_every_service_loads_a_config_file_that_is_mounted_and_exists():
    for name, service in compose()["services"].items():
        if not any(str(arg).startswith("--config") for arg in service.get("command", [])):
            continue  # ClickHouse, Grafana and the rollup of the fleet profile: tests/fleet/test_fleet_config.py
        target = config_arg(service)
        volumes = mounts(service)
        assert target in volumes, f"{name}: --config {target} is not a mounted file"
        host = REPO / volumes[target]
        assert host.is_file(), f"{name}: mounts {volumes[target]}, which does not exist"
        assert host.parent == EXPORTERS, f"{name}: its config should come from exporters/, not {host}"
        assert str(volumes[target]).startswith("./"), "relative to the compose file, so it works from any checkout"


def test_collector_publishes_exactly_its_receivers_and_health_check():
    _, cfg = mounted_config("collector")
    ports = published(compose()["services"]["collector"])
    receiver_ports = {port_of(p["endpoint"]) for p in cfg["receivers"]["otlp"]["protocols"].values()}
    assert receiver_ports == {4317, 4318}, "the endpoints docs/jaeger.md's 'View it in Jaeger' tells ranks to use"
    health = port_of(cfg["extensions"]["health_check"]["endpoint"])
    assert set(ports) == receiver_ports | {health}
    for protocol in cfg["receivers"]["otlp"]["protocols"].values():
        assert protocol["endpoint"].startswith("0.0.0.0:"), "a container listener on localhost is unreachable"


def test_jaeger_publishes_the_ui_its_query_extension_serves():
    _, cfg = mounted_config("jaeger")
    ui = port_of(cfg["extensions"]["jaeger_query"]["http"]["endpoint"])
    assert ui == 16686
    assert set(published(compose()["services"]["jaeger"])) == {ui}, "only the UI; the collector owns 4317/4318"


def test_jaeger_healthcheck_probes_its_healthcheck_extension():
    service = compose()["services"]["jaeger"]
    _, cfg = mounted_config("jaeger")
    url = next(arg for arg in service["healthcheck"]["test"] if arg.startswith("http"))
    assert "healthcheckv2" in cfg["service"]["extensions"]
    assert url.endswith(f":{port_of(cfg['extensions']['healthcheckv2']['http']['endpoint'])}/status")
    assert compose()["services"]["collector"]["depends_on"]["jaeger"]["condition"] == "service_healthy"


def test_collector_exports_to_the_jaeger_service_otlp_receiver():
    _, collector = mounted_config("collector")
    _, jaeger = mounted_config("jaeger")
    host, port = collector["exporters"]["otlp/jaeger"]["endpoint"].rsplit(":", 1)
    assert host in compose()["services"], f"{host} is not a compose service"
    assert host == "jaeger"
    assert port_of(jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]) == int(port)
    assert "otlp" in jaeger["service"]["pipelines"]["traces"]["receivers"]


def test_collector_replays_the_mounted_trace_directory():
    service = compose()["services"]["collector"]
    volumes = mounts(service)
    assert volumes.get("/loadtrace-traces") == "${LOADTRACE_DIR:-./loadtrace-traces}"
    assert any(str(v).startswith("${LOADTRACE_DIR") and str(v).endswith(":ro") for v in service["volumes"]), (
        "replay only reads: mount the job's files read-only"
    )
    _, cfg = mounted_config("collector")
    replay = cfg["receivers"]["otlpjsonfile"]
    assert replay["include"] and all(
        p.startswith("/loadtrace-traces/") and p.endswith(".jsonl") for p in replay["include"]
    )
    assert "**" in replay["include"][0], "files live in per-job sub-folders by default"
    assert replay["start_at"] == "beginning", "the file consumer's default `end` would skip every existing span"
    assert "otlpjsonfile" in cfg["service"]["pipelines"]["traces"]["receivers"]
    # loadtrace writes trace files 0600 in 0700 folders; the image's own uid (10001) could not read them.
    assert "user" in service, "run the collector as the job's user so it can read owner-only trace files"


def components_for(name: str) -> tuple[dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    return (JAEGER_COMPONENTS, JAEGER_KEYS) if name == "jaeger.yaml" else (CONTRIB_COMPONENTS, CONTRIB_KEYS)


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_config_parses_and_has_a_traces_pipeline(name):
    cfg = config(name)
    assert set(cfg) <= {*SECTIONS, "service"}, f"unknown top-level sections: {set(cfg) - {*SECTIONS, 'service'}}"
    assert "traces" in cfg["service"]["pipelines"]
    for pipeline_id in cfg["service"]["pipelines"]:
        assert kind(pipeline_id) in {"traces", "metrics"}, "loadtrace emits traces and its metrics only"


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_collectors_take_the_progress_metrics_ranks_send(name):
    """A receiver without a metrics pipeline refuses OTLP metrics (HTTP 404, gRPC Unimplemented): each loading rank
    with an OTLP endpoint would then say "export failing" once. Every collector that receives OTLP takes them."""
    cfg = config(name)
    metrics = cfg["service"]["pipelines"].get("metrics")
    assert metrics is not None, f"{name}: no metrics pipeline, so the ranks' progress metrics are refused"
    otlp_receivers = [r for r in cfg["receivers"] if kind(r) == "otlp"]
    assert otlp_receivers and set(otlp_receivers) <= set(metrics["receivers"])
    assert metrics["processors"][0] == "memory_limiter"


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_pipelines_reference_only_defined_components_and_use_all_of_them(name):
    cfg = config(name)
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for pipeline_id, pipeline in cfg["service"]["pipelines"].items():
        assert pipeline.get("receivers") and pipeline.get("exporters"), f"{pipeline_id} needs receivers and exporters"
        for section in ("receivers", "processors", "exporters"):
            for component_id in pipeline.get(section) or []:
                assert component_id in (cfg.get(section) or {}), (
                    f"{pipeline_id} uses undefined {section[:-1]} {component_id}"
                )
                used[section].add(component_id)
    for component_id in cfg["service"].get("extensions") or []:
        assert component_id in (cfg.get("extensions") or {}), f"service uses undefined extension {component_id}"
        used["extensions"].add(component_id)
    for section in SECTIONS:
        unused = set(cfg.get(section) or {}) - used[section]
        assert not unused, f"{name}: {section} defined but never used: {sorted(unused)}"


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_component_types_are_shipped_by_the_image(name):
    allowed, _ = components_for(name)
    cfg = config(name)
    for section in SECTIONS:
        for component_id in cfg.get(section) or {}:
            assert kind(component_id) in allowed[section], (
                f"{name}: {section[:-1]} type {kind(component_id)!r} is not in the pinned image's allow-list"
            )


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_component_keys_are_ones_the_component_accepts(name):
    _, known = components_for(name)
    cfg = config(name)
    for section in SECTIONS:
        for component_id, settings in (cfg.get(section) or {}).items():
            keys = known.get((section, kind(component_id)))
            assert keys is not None, f"{name}: no verified key list for {section[:-1]} {kind(component_id)!r}; add one"
            extra = set(settings or {}) - keys
            assert not extra, f"{name}: {component_id} has keys {sorted(extra)} not verified for {kind(component_id)}"


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_nested_settings_use_known_keys(name):
    cfg = config(name)
    for receiver_id, receiver in (cfg.get("receivers") or {}).items():
        if kind(receiver_id) == "otlp":
            protocols = receiver["protocols"]
            assert set(protocols) <= {"grpc", "http"}
            for protocol in protocols.values():
                assert set(protocol) <= GRPC_HTTP_SERVER_KEYS
                assert "endpoint" in protocol, "the default endpoint is localhost: always say where to listen"
    for exporter_id, exporter in (cfg.get("exporters") or {}).items():
        if kind(exporter_id) == "otlp":
            assert set(exporter.get("tls") or {}) <= TLS_CLIENT_KEYS
            assert set(exporter.get("sending_queue") or {}) <= SENDING_QUEUE_KEYS
            assert set(exporter.get("retry_on_failure") or {}) <= RETRY_KEYS
            assert expand_env_default(exporter["endpoint"]) or "${env:" in exporter["endpoint"]


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_environment_references_use_the_env_provider(name):
    for ref in ENV_REF.findall((EXPORTERS / name).read_text()):
        assert ENV_REF_OK.fullmatch(ref), f"{name}: ${{{ref}}} is not ${{env:NAME}} or ${{env:NAME:-default}}"


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_collectors_limit_memory_first_and_batch(name):
    processors = config(name)["service"]["pipelines"]["traces"]["processors"]
    assert processors[0] == "memory_limiter", "first, so back-pressure reaches the receivers"
    assert "batch" in processors
    if "groupbytrace" in processors:
        assert processors.index("groupbytrace") < processors.index("batch"), "batch before groupbytrace undoes it"


def test_agent_forwards_to_the_central_collector_from_the_environment():
    cfg = config("collector-agent.yaml")
    exporters = cfg["service"]["pipelines"]["traces"]["exporters"]
    assert [cfg["exporters"][e]["endpoint"] for e in exporters] == ["${env:LOADTRACE_CENTRAL_COLLECTOR}"]


def test_central_collector_groups_by_trace_and_exports_to_jaeger():
    cfg = config("collector-central.yaml")
    assert "groupbytrace" in cfg["service"]["pipelines"]["traces"]["processors"]
    (exporter,) = cfg["service"]["pipelines"]["traces"]["exporters"]
    jaeger = config("jaeger.yaml")
    default = expand_env_default(cfg["exporters"][exporter]["endpoint"])
    assert port_of(default) == port_of(jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])


def test_jaeger_storage_names_line_up():
    cfg = config("jaeger.yaml")
    backends = cfg["extensions"]["jaeger_storage"]["backends"]
    for name, backend in backends.items():
        assert len(backend) == 1 and set(backend) <= JAEGER_BACKEND_KINDS, (
            f"backend {name}: one of {JAEGER_BACKEND_KINDS}"
        )
    assert cfg["extensions"]["jaeger_query"]["storage"]["traces"] in backends
    assert set(cfg["extensions"]["jaeger_query"]["storage"]) <= {"traces", "traces_archive", "metrics"}
    for exporter_id, exporter in cfg["exporters"].items():
        if kind(exporter_id) == "jaeger_storage_exporter":
            assert exporter["trace_storage"] in backends
    memory = [b["memory"] for b in backends.values() if "memory" in b]
    assert memory and all(set(m) == {"max_traces"} and m["max_traces"] > 0 for m in memory), "in memory, bounded"
