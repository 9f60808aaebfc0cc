#!/usr/bin/env bash
# The main job, end to end: write a sharded checkpoint from a randomly initialised model, load it on 2 ranks with
# torchrun under FSDP cpu_ram_efficient_loading with only LOADTRACE=1 added (spans go to the default OTLP JSON Lines
# files), then report per-rank totals and findings.
#   bash examples/demo.sh [plain|fsdp|zero3]        (run from anywhere; uses the repo's .venv when there is one)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$repo/.venv/bin" ] && PATH="$repo/.venv/bin:$PATH"
mode=${1:-fsdp}
work=${DEMO_DIR:-$repo/demo-run}
mkdir -p "$work" && cd "$work"

[ -f checkpoint/config.json ] || python "$repo/examples/make_checkpoint.py" checkpoint
if ! LOADTRACE=1 torchrun --nproc_per_node 2 "$repo/examples/load.py" checkpoint --mode "$mode" 2> torchrun.log; then
  echo "demo: the job failed; the last lines of $work/torchrun.log:" >&2
  tail -n 25 torchrun.log >&2
  exit 1
fi
# Rank 0's own line: which job it traced and the command that reports it.
grep '^loadtrace: job ' torchrun.log || true
echo
(cd "$work" && loadtrace report loadtrace-traces/ --latest)
echo
echo "next:"
echo "  cd $work && loadtrace report loadtrace-traces/ --latest --format json   # every number exact"
echo "  loadtrace view $work/loadtrace-traces                                  # the same job in Jaeger"
echo "  bash $repo/examples/demo.sh plain    # or zero3: the other strategies, into the same folder"
