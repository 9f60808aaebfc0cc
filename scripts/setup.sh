#!/usr/bin/env bash
# Set up everything loadtrace's demo and tests need, from a fresh machine with Python 3.11 and pip:
#   .venv     torch (CPU), the latest transformers, accelerate, deepspeed, and loadtrace installed from its wheel
#   .venv512  the same with transformers 5.12.0: the release in which both public reports were made (regression matrix)
# loadtrace itself is installed as users get it (a built wheel, not editable), so its .pth activation is what is tested.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# Installed first and explicitly: a bare `torch` requirement would pull a multi-GB CUDA build.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

make_venv() {
  local dir=$1 transformers_spec=$2
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$TORCH_SPEC"
  "$dir/bin/pip" install -q --disable-pip-version-check "$transformers_spec" ".[test]"
  # Re-install loadtrace itself every time: the source may have changed since the last build.
  "$dir/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall .
}

make_venv .venv transformers &
latest=$!
make_venv .venv512 transformers==5.12.0 &
legacy=$!
wait $latest
wait $legacy

# Debian's docker-compose validates docker-compose.yml without an engine; installed only where we may (root + apt).
if ! command -v docker-compose >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq docker-compose) >/dev/null 2>&1 || echo "setup: docker-compose not installed; its check will be skipped"
fi
# tmux: `loadtrace top` is tested in a real terminal (tests/e2e/test_top_live.py) and its README screenshot is a tmux
# capture (scripts/top_screenshot.py); the same where we may, else those are skipped.
if ! command -v tmux >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq tmux) >/dev/null 2>&1 || echo "setup: tmux not installed; the terminal test of loadtrace top will be skipped"
fi
# Debian's Chromium opens the timeline page in tests/e2e/test_timeline_browser.py; the same where we may, else skipped.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 || echo "setup: chromium not installed; the browser tests will be skipped"
fi
echo "setup: done (.venv: $(.venv/bin/python -c 'import transformers; print("transformers", transformers.__version__)'); .venv512: $(.venv512/bin/python -c 'import transformers; print("transformers", transformers.__version__)'))"
echo "setup: loadtrace is .venv/bin/loadtrace; \`source .venv/bin/activate\` puts it (and torchrun, pytest) on PATH"
# The real backends of tests/backends/: Jaeger v2 and the collector built from the Go module proxy into .backends/bin
# (scripts/build_backends.sh; the first build takes minutes, then Go's caches make it seconds, an unchanged one ~0 s).
if command -v go >/dev/null; then
  bash scripts/build_backends.sh || echo "setup: the backends did not build; tests/backends/ will be skipped"
else
  echo "setup: no Go; tests/backends/ will be skipped (install Go, then bash scripts/build_backends.sh)"
fi
