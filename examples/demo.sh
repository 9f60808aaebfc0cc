#!/usr/bin/env bash
# The main job, end to end: write a sharded checkpoint from a randomly initialised model, load it on 2 ranks with
# torchrun under FSDP cpu_ram_efficient_loading with only LOADTRACE=1 added (spans go to the default OTLP JSON Lines
# files), then report per-rank totals and findings.
#   bash examples/demo.sh [plain|fsdp|zero3]        (run from anywhere; uses the repo's .venv when there is one)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
callers_loadtrace=$(command -v loadtrace || true)
[ -d "$repo/.venv/bin" ] && PATH="$repo/.venv/bin:$PATH"
# The commands printed below work as printed in the caller's shell: `loadtrace` when the one this demo runs is first on
# their PATH (an activated .venv), else its path (scripts/setup.sh does not change the caller's PATH).
loadtrace=loadtrace
[ "$callers_loadtrace" = "$(command -v loadtrace)" ] || loadtrace=$(printf %q "$(command -v loadtrace || echo loadtrace)")
mode=${1:-fsdp}
work=${DEMO_DIR:-$repo/demo-run}
mkdir -p "$work" && cd "$work"

[ -f checkpoint/config.json ] || python "$repo/examples/make_checkpoint.py" checkpoint
status=0
LOADTRACE=1 torchrun --nproc_per_node 2 "$repo/examples/load.py" checkpoint --mode "$mode" 2> torchrun.log || status=$?
if [ "$status" != 0 ]; then
  # The workers' own error comes before torchrun's long summary of their exits: show the first, then the end.
  {
    echo "demo: the job failed (exit $status). Its log is $work/torchrun.log; the first error in it:"
    grep -m 1 -E 'Error|error:' torchrun.log | sed 's/^/  /' || true
    echo "the log's last lines:"
    tail -n 15 torchrun.log | sed 's/^/  /'
  } >&2
  exit "$status"
fi
# The job as it ran, with rank 0's own line: which job it traced and the command that reports it (from $work).
at=$(printf %q "$work")
echo "\$ cd $at && LOADTRACE=1 torchrun --nproc_per_node 2 $(printf %q "$repo")/examples/load.py checkpoint --mode $mode"
grep '^loadtrace: job ' torchrun.log || true
echo "\$ $loadtrace report loadtrace-traces/ --latest"
loadtrace report loadtrace-traces/ --latest
echo
echo "next:"
echo "  cd $at && $loadtrace report loadtrace-traces/ --latest --format json   # every number exact"
echo "  $loadtrace view $at/loadtrace-traces                                  # the same job in Jaeger"
echo "  bash $(printf %q "$repo")/examples/demo.sh plain    # or zero3: the other strategies, into the same folder"
activate=$(dirname "$(command -v loadtrace)")/activate
if [ "$loadtrace" != loadtrace ] && [ -f "$activate" ]; then
  echo "  source $(printf %q "$activate")    # then \`loadtrace\` alone works, as in rank 0's line"
fi
