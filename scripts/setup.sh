#!/usr/bin/env bash
# Set up everything loadtrace's demo and tests need, from a fresh machine with Python 3.11 and pip:
#   .venv     torch, transformers 5.24.0 (the latest release whose facts the tests record), accelerate, deepspeed,
#             and loadtrace installed from its wheel; `python scripts/new_release.py VERSION` moves it to a new release
#   .venv512  the same with transformers 5.12.0: the release in which both public reports were made (regression matrix)
# transformers is pinned to the releases whose field facts the tests hold (tests/support/field_facts.py); moving to a
# new release is a deliberate step, not whatever PyPI serves today.
# loadtrace itself is installed as users get it (a built wheel, not editable), so its .pth activation is what is tested.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# Installed first and explicitly: a bare `torch` requirement would pull another multi-GB build.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

# torch once per machine, shared by both venvs and by every clone on this machine: where no local CPU build is offered,
# PyPI's is a CUDA build of about 4.6 GB installed. It lives in one folder outside the clone; each venv finds it through
# a .pth line placed after its own site-packages, so a package a venv installs itself still wins.
PY_TAG=$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
TORCH_NAME=${TORCH_SPEC//==/-}
SHARED_TORCH=${LOADTRACE_SHARED_TORCH:-${XDG_CACHE_HOME:-$HOME/.cache}/loadtrace/${TORCH_NAME//[^A-Za-z0-9.-]/_}-$PY_TAG}

shared_torch() {
  mkdir -p "$(dirname "$SHARED_TORCH")"
  # One installer at a time (two clones set up at once); the folder appears whole or not at all.
  exec 9>"$SHARED_TORCH.lock"
  flock 9
  if [ ! -f "$SHARED_TORCH/.complete" ]; then
    rm -rf "$SHARED_TORCH.partial"
    "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore --target "$SHARED_TORCH.partial" "$TORCH_SPEC"
    touch "$SHARED_TORCH.partial/.complete"
    rm -rf "$SHARED_TORCH" && mv "$SHARED_TORCH.partial" "$SHARED_TORCH"
  fi
  flock -u 9
}

make_venv() {
  local dir=$1 transformers_spec=$2
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  local site
  site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$SHARED_TORCH" >"$site/_loadtrace_shared_torch.pth"
  # torch's console script, which pip wrote into the shared folder for the interpreter that installed it.
  printf '#!%s\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n' "$(cd "$dir" && pwd)/bin/python" \
    >"$dir/bin/torchrun"
  chmod +x "$dir/bin/torchrun"
  "$dir/bin/pip" install -q --disable-pip-version-check "$transformers_spec" ".[test]"
  # Re-install loadtrace itself every time: the source may have changed since the last build.
  "$dir/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall .
  # DeepSpeed JIT-builds its CPU communication op at a ZeRO-3 job's init_distributed (~30 s of compiling): once here,
  # into the venv's own cache, which the test jobs and gen_docs use, so no job waits for it (a fresh venv's sources are
  # newer than any older build, and two venvs sharing one cache rebuild it each time they alternate). By the absolute
  # path the jobs use: ninja rebuilds a cache first built through a relative one (in CI, 2-3 min into the suite).
  local root
  root=$(cd "$dir" && pwd)
  TORCH_EXTENSIONS_DIR="$root/torch_extensions" PATH="$root/bin:$PATH" "$root/bin/python" -c \
    'from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()' >/dev/null 2>&1 ||
    echo "setup: DeepSpeed's CPU comm op did not build in $dir; the first ZeRO-3 job there builds it"
}

shared_torch
make_venv .venv transformers==5.24.0 &
latest=$!
make_venv .venv512 transformers==5.12.0 &
legacy=$!
wait $latest
wait $legacy

# Debian's docker-compose validates docker-compose.yml without an engine; installed only where we may (root + apt).
if ! command -v docker-compose >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq docker-compose) >/dev/null 2>&1 || echo "setup: docker-compose not installed; its check will be skipped"
fi
# tmux: `loadtrace top` is tested in a real terminal (tests/e2e/test_top_live.py) and its screenshot in docs/commands.md is a tmux
# capture (scripts/top_screenshot.py); the same where we may, else those are skipped.
if ! command -v tmux >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq tmux) >/dev/null 2>&1 || echo "setup: tmux not installed; the terminal test of loadtrace top will be skipped"
fi
# Debian's Prometheus (2.42) scrapes the built collector in tests/backends/test_fleet_metrics.py; the same where we may.
if ! command -v prometheus >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq prometheus) >/dev/null 2>&1 || echo "setup: prometheus not installed; the fleet metrics test will be skipped"
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
