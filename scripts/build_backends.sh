#!/usr/bin/env bash
# Build the real backends that tests/backends/ runs, from their own sources on the Go module proxy:
#   .backends/bin/jaeger             Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, scripts/backends/jaeger/go.mod)
#   .backends/bin/otelcol-loadtrace  an OpenTelemetry Collector with exactly the components exporters/*.yaml name, all
#                                    at the collector release Jaeger itself is built on (scripts/backends/otelcol/)
# go.mod and go.sum pin every module, so each machine builds the same binaries; docker-compose.yml pins the images of
# the same releases. Go's module and build caches make a rebuild cheap, and a binary whose sources did not change is
# not relinked at all (its .stamp). Needs Go (go.mod's version or newer) and the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null; then
  echo "build_backends: Go is not installed (https://go.dev/doc/install); the backend tests will be skipped" >&2
  exit 1
fi
BIN=${LOADTRACE_BACKENDS_BIN:-$PWD/.backends/bin}
mkdir -p "$BIN"

# build NAME MODULE_DIR PACKAGE LDFLAGS: go build, unless the stamp says these sources and this Go built it already.
build() {
  local name=$1 dir=$2 package=$3 ldflags=$4 stamp
  stamp=$( (cat "$dir"/go.mod "$dir"/go.sum; cat "$dir"/*.go 2>/dev/null || true; go version; echo "$ldflags") | sha256sum)
  if [ -x "$BIN/$name" ] && [ "$(cat "$BIN/$name.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "build_backends: $name is up to date"
    return
  fi
  local start=$SECONDS
  # Into a temporary name first, so an interrupted build never leaves a binary that looks finished.
  (cd "$dir" && go build -ldflags "-s -w $ldflags" -o "$BIN/$name.tmp" "$package")
  mv "$BIN/$name.tmp" "$BIN/$name"
  echo "$stamp" >"$BIN/$name.stamp"
  echo "build_backends: built $name in $((SECONDS - start)) s"
}

module_version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# Jaeger's v1.x module tag carries the v2 release of the same commit (v1.75.0 is Jaeger v2.12.0): the version the
# binary reports, and the jaegertracing/jaeger image tag docker-compose.yml pins.
JAEGER_V2=v2.12.0
[ "$(module_version scripts/backends/jaeger github.com/jaegertracing/jaeger)" = v1.75.0 ] ||
  { echo "build_backends: scripts/backends/jaeger/go.mod moved off v1.75.0: update JAEGER_V2 here" >&2; exit 1; }
build jaeger scripts/backends/jaeger github.com/jaegertracing/jaeger/cmd/jaeger \
  "-X github.com/jaegertracing/jaeger/internal/version.latestVersion=$JAEGER_V2"

collector=$(module_version scripts/backends/otelcol go.opentelemetry.io/collector/otelcol)
build otelcol-loadtrace scripts/backends/otelcol . "-X main.version=${collector#v}"
