"""Promise (issue 48, point 6): a job's live state is its own user's alone, and nothing of loadtrace acts on a state
file another user owns.

A process whose spans go only over OTLP keeps its state file in its job's own owner-only folder under its user's
state root (``$XDG_RUNTIME_DIR/loadtrace/<job id>/``, else ``<temp dir>/loadtrace-<uid>/<job id>/``): here two users
(this one, root, and ``nobody`` through ``setpriv``) run a traced process each, with the same job id, sharing one
temporary directory as users of a host share ``/tmp``. Each user's state is in a folder the other cannot enter;
``loadtrace top`` over the shared directory shows the reader's own ranks and says it skipped the other user's; the
launcher's witness follows no pointer to, or from, another user's file; a report refuses another user's state file put
in a job's folder (and trusts a colleague's job folder as theirs). Skipped with one line where the tests are not root.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import typing_extensions
from support.installed import require_installed
from support.venvs import discover

from loadtrace import semconv, statefile
from loadtrace.analysis.sources import read_files
from loadtrace.instrumentation.beside import witness

NOBODY = 65534
SETPRIV = shutil.which("setpriv")
JOB = "shared-name"
LOAD = """
import safetensors, loadtrace  # LOADTRACE=1 instruments at the first hooked library's import
with loadtrace.traced_load("one"):
    print("loaded", flush=True)
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary directory as ``/tmp`` is: everyone's (sticky, world-writable), outside the tests' root-only one."""
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("a second user needs root and setpriv (util-linux)")
    path = Path(tempfile.mkdtemp(prefix="loadtrace-users-", dir="/tmp"))
    path.chmod(0o1777)
    # This interpreter may find a module where another user cannot read it (setup.sh's shared torch folder, under
    # root's home, brings typing_extensions): a copy of it where nobody can.
    readable = path / "site"
    readable.mkdir(mode=0o755)
    shutil.copy(typing_extensions.__file__, readable)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run(shared: Path, as_nobody: bool, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``argv`` (a traced ``LOAD`` by default) as this user or as ``nobody``, with ``shared`` as its temporary
    directory and its working directory, spans only over OTLP (to a closed port)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOADTRACE", "OTEL_", "XDG_", "TORCHELASTIC"))}
    clean.update(
        LOADTRACE="1",
        LOADTRACE_JOB_ID=JOB,
        LOADTRACE_EXIT_TIMEOUT="0.2",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        TMPDIR=str(shared),
    )
    clean.update(env or {})
    command = list(argv) or [sys.executable, "-c", LOAD]
    if as_nobody:
        clean["PYTHONPATH"] = str(shared / "site")
        command = [str(SETPRIV), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
    return subprocess.run(command, cwd=shared, env=clean, capture_output=True, text=True, timeout=120)


def state_of(root: Path) -> Path:
    (path,) = root.glob(f"{JOB}/*{semconv.STATE_SUFFIX}")
    return path


def owner_only(path: Path, uid: int, mode: int) -> bool:
    info = path.lstat()
    return info.st_uid == uid and stat.S_IMODE(info.st_mode) == mode


def test_each_user_s_job_state_is_in_a_folder_only_that_user_can_reach(shared_tmp):
    mine, theirs = run(shared_tmp, False), run(shared_tmp, True)
    assert mine.returncode == 0 and theirs.returncode == 0, (mine.stderr, theirs.stderr)
    my_root, their_root = shared_tmp / f"loadtrace-{os.geteuid()}", shared_tmp / f"loadtrace-{NOBODY}"
    my_state, their_state = state_of(my_root), state_of(their_root)  # one job id, two users: two jobs
    for root, state, uid in ((my_root, my_state, os.geteuid()), (their_root, their_state, NOBODY)):
        assert owner_only(root, uid, 0o700) and owner_only(state.parent, uid, 0o700), oct(root.stat().st_mode)
        assert owner_only(state, uid, 0o600)
    # nobody can neither list nor read this user's state.
    peek = f"import os; os.listdir({str(my_root)!r})"
    denied = run(shared_tmp, True, sys.executable, "-c", peek)
    assert denied.returncode != 0 and "PermissionError" in denied.stderr, denied.stderr
    denied = run(shared_tmp, True, sys.executable, "-c", f"open({str(my_state)!r}, 'rb')")
    assert denied.returncode != 0 and "PermissionError" in denied.stderr, denied.stderr


def test_top_shows_its_own_user_s_ranks_and_says_it_skipped_the_others(shared_tmp):
    venv = discover()[0]
    require_installed(venv)
    assert run(shared_tmp, False).returncode == 0 and run(shared_tmp, True).returncode == 0
    top = run(shared_tmp, False, str(venv.bin / "loadtrace"), "top", "--once", "--format", "json", str(shared_tmp))
    assert top.returncode == 0, top.stderr
    found = json.loads(top.stdout)
    assert [row["pid"] for row in found["ranks"]] == [statefile.read(state_of(shared_tmp / "loadtrace-0")).pid]
    assert found["other_users_state_files"] == 1
    table = run(shared_tmp, False, str(venv.bin / "loadtrace"), "top", "--once", str(shared_tmp)).stdout
    assert "1 state file of other users skipped here: top reads and probes only yours" in table, table
    # nobody, pointed at the same directory, sees its own rank alone: this user's folder is closed to it.
    theirs = run(shared_tmp, True, str(venv.bin / "loadtrace"), "top", "--once", "--format", "json", str(shared_tmp))
    assert theirs.returncode == 0, theirs.stderr
    assert [row["pid"] for row in json.loads(theirs.stdout)["ranks"]] == [
        statefile.read(state_of(shared_tmp / f"loadtrace-{NOBODY}")).pid
    ]


def test_the_witness_follows_no_pointer_to_or_from_another_user(shared_tmp, tmp_path):
    assert run(shared_tmp, False).returncode == 0 and run(shared_tmp, True).returncode == 0
    mine, theirs = state_of(shared_tmp / "loadtrace-0"), state_of(shared_tmp / f"loadtrace-{NOBODY}")
    pointers = tmp_path / "witness"
    pointers.mkdir(mode=0o700)
    for name, target in (("101", mine), ("102", theirs), ("103", mine)):
        (pointers / name).write_text(str(target))
    os.chown(pointers / "103", NOBODY, NOBODY)  # a pointer someone else left, to this user's own state
    assert witness._follow(str(pointers), "101") is not None
    assert witness._follow(str(pointers), "102") is None, "another user's state file"
    assert witness._follow(str(pointers), "103") is None, "another user's pointer"


def test_a_report_refuses_another_user_s_state_file_in_a_job_s_folder(shared_tmp):
    assert run(shared_tmp, False).returncode == 0 and run(shared_tmp, True).returncode == 0
    mine = state_of(shared_tmp / "loadtrace-0")
    planted = mine.with_name("rank00007-elsewhere-1" + semconv.STATE_SUFFIX)
    shutil.copyfile(mine, planted)
    os.chown(planted, NOBODY, NOBODY)
    found = read_files(mine.parent)
    assert [state.path for state in found.states] == [str(mine)] and found.skipped_state_files == 1
    # A colleague's job folder (theirs, their files in it) reads as theirs.
    theirs = read_files(shared_tmp / f"loadtrace-{NOBODY}" / JOB)
    assert len(theirs.states) == 1 and theirs.skipped_state_files == 0


def test_a_private_runtime_directory_is_preferred_and_one_open_to_others_is_not_used(shared_tmp, tmp_path):
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    assert run(shared_tmp, False, env={"XDG_RUNTIME_DIR": str(runtime)}).returncode == 0
    assert owner_only(state_of(runtime / "loadtrace").parent, os.geteuid(), 0o700)
    runtime.chmod(0o755)  # not the user's alone: the temporary directory instead
    assert run(shared_tmp, False, env={"XDG_RUNTIME_DIR": str(runtime), "LOADTRACE_JOB_ID": "other"}).returncode == 0
    assert not (runtime / "loadtrace" / "other").exists() and (shared_tmp / "loadtrace-0" / "other").is_dir()
