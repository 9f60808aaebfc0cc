"""docs/commands.md's ``loadtrace top`` screenshot: a real 2-rank load watched in tmux, its pane captured as text.

    .venv/bin/python scripts/top_screenshot.py      # minutes: a checkpoint, a torchrun job, one capture mid-load

Writes ``docs/samples/top/capture.txt``; ``scripts/gen_docs.py`` puts it into docs/commands.md (sample ``top``). The job
is ``tests/workers/slow_load.py`` (rank 1 sleeps 1 s before each tensor it reads, as on slow storage) on the 1 MB
checkpoint of ``examples/make_checkpoint.py``; the capture is taken once rank 1 is a third through its load.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "samples" / "top" / "capture.txt"
SESSION = "loadtrace-top-screenshot"

sys.path.insert(0, str(REPO / "tests"))
from support.live import rank_percent, tmux  # noqa: E402 - the terminal test's own helpers, found above


def main() -> int:
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed (scripts/setup.sh installs it)")
    bin_dir = REPO / ".venv" / "bin"
    with tempfile.TemporaryDirectory() as work:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_", "ACCELERATE_"))}
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        subprocess.run([bin_dir / "python", REPO / "examples" / "make_checkpoint.py", "checkpoint"], cwd=work, env=env)
        traces = Path(work) / "traces"
        env.update(LOADTRACE="1", HF_DEACTIVATE_ASYNC_LOAD="1", LOADTRACE_DIR=str(traces))
        worker = REPO / "tests" / "workers" / "slow_load.py"
        job = subprocess.Popen(
            [bin_dir / "torchrun", "--nproc_per_node", "2", worker, "checkpoint", "--delay", "1"],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not traces.is_dir():
                time.sleep(0.2)
            tmux("new-session", "-d", "-s", SESSION, "-x", "150", "-y", "12", f"{bin_dir / 'loadtrace'} top {traces}")
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                screen = tmux("capture-pane", "-p", "-t", SESSION)
                if (rank_percent(screen, 1) or 0) >= 33:
                    text = screen.replace(work, "/tmp/job").rstrip() + "\n"
                    OUT.parent.mkdir(parents=True, exist_ok=True)
                    OUT.write_text("\n".join(line.rstrip() for line in text.splitlines()) + "\n")
                    print(f"wrote {OUT.relative_to(REPO)}")
                    return 0
                time.sleep(0.5)
            print("rank 1 never got a third through its load", file=sys.stderr)
            return 1
        finally:
            tmux("kill-session", "-t", SESSION)
            job.kill()
            job.wait()


if __name__ == "__main__":
    sys.exit(main())
