"""Test worker: ``examples/load.py``'s load, plus an independent count of what this rank did.

    torchrun --nproc_per_node 2 tests/workers/count_load.py CKPT --mode plain|fsdp|zero3 --out DIR

Writes ``DIR/count-rank<R>.json``. The count knows nothing of loadtrace (it must not: it is what loadtrace's numbers are
checked against). While ``from_pretrained`` runs it

- replaces ``safe_open`` in ``safetensors`` and in every imported ``transformers`` module that bound it with a plain
  counting proxy around whatever that name held (the real constructor, or loadtrace's wrapper when tracing is on), and
  counts per file: opens, tensors and bytes returned by ``get_tensor`` and by indexing ``get_slice`` results;
- wraps ``torch.zeros_like`` / ``torch.empty_like`` and counts calls and result bytes by device type;
- counts calls of transformers' loading phases (``load_state_dict``, ``convert_and_load_state_dict_in_model``,
  ``_load_state_dict_into_zero3_model``, ``_move_missing_keys_from_meta_to_device``);
- wraps ``WeightConverter.convert`` (whoever calls it: the usual path, or ZeRO-3's
  ``_apply_weight_conversions_to_state_dict``) and counts conversions, the bytes of the real tensors they produced and
  the outputs on ``meta``.

After loading it records the bytes the returned model holds per device type, and whether loadtrace was imported and
``torch.zeros_like`` patched before the counters went in (the activation checks).

The worker runs from the installed packages only: it loads ``examples/load.py`` by path and never adds the repository
to ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Counts:
    """Thread-safe tallies; transformers reads tensors from a thread pool."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: dict[str, dict[str, int]] = defaultdict(lambda: {"opens": 0, "tensors": 0, "bytes": 0})
        self.get_tensor_calls = 0
        self.slice_reads = 0
        self.materialized: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "bytes": 0})
        self.materialized_by_function: dict[str, int] = defaultdict(int)
        self.threads: set[str] = set()
        self.phases: dict[str, int] = defaultdict(int)
        self.conversions = self.conversion_bytes = self.meta_outputs = 0

    def opened(self, path: str) -> None:
        with self.lock:
            self.files[path]["opens"] += 1

    def read(self, path: str, tensor: Any, how: str) -> None:
        nbytes = int(tensor.nbytes)
        with self.lock:
            entry = self.files[path]
            entry["tensors"] += 1
            entry["bytes"] += nbytes
            if how == "get_tensor":
                self.get_tensor_calls += 1
            else:
                self.slice_reads += 1
            self.threads.add(threading.current_thread().name)

    def materialize(self, function: str, tensor: Any) -> None:
        device = tensor.device.type
        with self.lock:
            self.materialized[device]["calls"] += 1
            self.materialized[device]["bytes"] += int(tensor.nbytes)
            self.materialized_by_function[f"{function} {device}"] += 1

    def phase(self, name: str) -> None:
        with self.lock:
            self.phases[name] += 1

    def converted(self, produced: dict[str, Any]) -> None:
        tensors = [t for value in produced.values() for t in (value if isinstance(value, list) else [value])]
        with self.lock:
            self.conversions += 1
            self.conversion_bytes += sum(int(t.nbytes) for t in tensors if t.device.type != "meta")
            self.meta_outputs += sum(1 for t in tensors if t.device.type == "meta")

    def as_dict(self) -> dict[str, Any]:
        files = {path: dict(entry) for path, entry in sorted(self.files.items())}
        return {
            "files": files,
            "opens": sum(f["opens"] for f in files.values()),
            "read_tensors": sum(f["tensors"] for f in files.values()),
            "read_bytes": sum(f["bytes"] for f in files.values()),
            "get_tensor_calls": self.get_tensor_calls,
            "slice_reads": self.slice_reads,
            "read_threads": sorted(self.threads),
            "materialized": {device: dict(entry) for device, entry in sorted(self.materialized.items())},
            "materialized_by_function": dict(sorted(self.materialized_by_function.items())),
            "phases": dict(sorted(self.phases.items())),
            "conversions": self.conversions,
            "conversion_bytes": self.conversion_bytes,
            "conversion_meta_outputs": self.meta_outputs,
        }


class Counted:
    """A proxy that counts the reads of one file's handle or slice, and is that handle or slice otherwise."""

    def __init__(self, inner: Any, path: str, counts: Counts) -> None:
        self._inner = inner
        self._path = path
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CountingSlice(Counted):
    def __getitem__(self, index: Any) -> Any:
        tensor = self._inner[index]
        self._counts.read(self._path, tensor, "slice")
        return tensor


class CountingFile(Counted):
    def get_tensor(self, name: str) -> Any:
        tensor = self._inner.get_tensor(name)
        self._counts.read(self._path, tensor, "get_tensor")
        return tensor

    def get_tensors(self) -> Any:
        tensors = self._inner.get_tensors()  # ``safetensors.torch.load_file`` (0.8)
        for tensor in tensors.values():
            self._counts.read(self._path, tensor, "get_tensor")
        return tensors

    def get_slice(self, name: str) -> Any:
        return CountingSlice(self._inner.get_slice(name), self._path, self._counts)

    def __enter__(self) -> CountingFile:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)


class CountingSafeOpen:
    def __init__(self, inner: Any, counts: Counts) -> None:
        self.inner = inner
        self.counts = counts

    def __call__(self, filename: Any, *args: Any, **kwargs: Any) -> CountingFile:
        handle = self.inner(filename, *args, **kwargs)
        path = os.path.basename(os.fspath(filename))
        self.counts.opened(path)
        return CountingFile(handle, path, self.counts)


MODULE_PHASES = ("load_state_dict", "convert_and_load_state_dict_in_model", "_load_state_dict_into_zero3_model")
METHOD_PHASES = ("_move_missing_keys_from_meta_to_device",)


class Counter:
    """Install the counting proxies for the duration of a ``with`` block; restore exactly what was there."""

    def __init__(self) -> None:
        self.counts = Counts()
        self._restore: list[tuple[Any, str, Any]] = []

    def _replace(self, owner: Any, name: str, value: Any) -> None:
        previous = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        self._restore.append((owner, name, previous))
        setattr(owner, name, value)

    def __enter__(self) -> Counts:
        import safetensors
        import torch
        import transformers.modeling_utils  # noqa: F401  (bind its safe_open before we look)

        proxies: dict[int, CountingSafeOpen] = {}

        def proxy_for(current: Any) -> CountingSafeOpen:
            if id(current) not in proxies:
                proxies[id(current)] = CountingSafeOpen(current, self.counts)
            return proxies[id(current)]

        self._replace(safetensors, "safe_open", proxy_for(safetensors.safe_open))
        for module_name, module in list(sys.modules.items()):
            if module is None or not module_name.startswith("transformers"):
                continue
            current = module.__dict__.get("safe_open")
            if current is not None and callable(current):
                self._replace(module, "safe_open", proxy_for(current))

        counts = self.counts
        for function in ("zeros_like", "empty_like"):
            original = getattr(torch, function)

            def counting(*args: Any, _original: Any = original, _function: str = function, **kwargs: Any) -> Any:
                result = _original(*args, **kwargs)
                counts.materialize(_function, result)
                return result

            self._replace(torch, function, counting)

        modeling_utils = sys.modules["transformers.modeling_utils"]
        for phase in MODULE_PHASES:
            current = getattr(modeling_utils, phase, None)
            if current is None:
                continue

            def counting_phase(*args: Any, _original: Any = current, _phase: str = phase, **kwargs: Any) -> Any:
                counts.phase(_phase)
                return _original(*args, **kwargs)

            self._replace(modeling_utils, phase, counting_phase)

        owner = modeling_utils.PreTrainedModel
        for phase in METHOD_PHASES:
            current = owner.__dict__.get(phase)
            if current is None:
                continue

            def counting_method(self_: Any, *args: Any, _original: Any = current, _phase: str = phase, **kwargs: Any):
                counts.phase(_phase)
                return _original.__get__(self_, type(self_))(*args, **kwargs)

            self._replace(owner, phase, counting_method)

        converter = sys.modules["transformers.core_model_loading"].WeightConverter
        convert = converter.__dict__["convert"]

        def counting_convert(self_: Any, *args: Any, **kwargs: Any) -> Any:
            produced = convert.__get__(self_, type(self_))(*args, **kwargs)
            counts.converted(produced)
            return produced

        self._replace(converter, "convert", counting_convert)
        return self.counts

    def __exit__(self, *exc: Any) -> None:
        for owner, name, value in reversed(self._restore):
            setattr(owner, name, value)
        self._restore.clear()


def held_bytes(model: Any) -> dict[str, int]:
    """Bytes of the parameters and buffers the model holds, by device type (``parameters()`` / ``buffers()`` already
    list a shared tensor once). Under ZeRO-3 a parameter's own data is an empty placeholder and what the rank holds is
    its partition, ``param.ds_tensor``."""
    held: dict[str, int] = defaultdict(int)
    for param in model.parameters():
        tensor = getattr(param, "ds_tensor", None)
        tensor = param if tensor is None else tensor
        held[tensor.device.type] += int(tensor.nbytes)
    for buffer in model.buffers():
        held[buffer.device.type] += int(buffer.nbytes)
    return dict(sorted(held.items()))


def activation_state() -> dict[str, Any]:
    """What loadtrace did to this interpreter before our code ran (the .pth's job)."""
    import torch

    return {
        "loadtrace_imported": "loadtrace" in sys.modules,
        "loadtrace_file": getattr(sys.modules.get("loadtrace"), "__file__", None),
        "zeros_like_original": torch.zeros_like is torch._C._VariableFunctions.zeros_like,
        "empty_like_original": torch.empty_like is torch._C._VariableFunctions.empty_like,
    }


def main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    load = load_example("load")
    parser_args = list(sys.argv[1:] if argv is None else argv)
    args = load.parse_args(parser_args)
    if not args.out:
        raise SystemExit("--out DIR is required")
    activation = activation_state()
    rank, world = load.init_distributed()
    keep_alive = load.prepare(args.mode)
    counter = Counter()
    with counter as counts:
        model = load.from_pretrained(args.ckpt)
    held = held_bytes(model)
    digest = load.weights_digest(model, args.mode)
    del keep_alive

    import transformers

    result = {
        "rank": rank,
        "world_size": world,
        "pid": os.getpid(),
        "mode": args.mode,
        "transformers": transformers.__version__,
        "loadtrace_env": os.environ.get("LOADTRACE"),
        "activation": activation,
        "held_bytes": held,
        "digest": digest,
        **counts.as_dict(),
    }
    load.write_json(args.out, f"count-rank{rank}.json", result)
    return leave(dist, f"rank {rank}/{world} mode {args.mode} digest {digest['sha256']}")


def leave(dist: Any, line: str) -> int:
    """The end of a rank that loaded: say ``line``, wait for every rank, leave the job's process group; exit 0."""
    print(line, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
