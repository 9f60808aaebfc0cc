"""Test worker: the loaders serving engines run, one after another, each with an independent count of what this rank
read and received.

    torchrun --nproc_per_node 2 tests/workers/stream_load.py CKPT --out DIR [--loaders a,b,...]
    python tests/workers/stream_load.py CKPT --out DIR --loaders fastsafetensors     # one process, no process group

Writes ``DIR/stream-rank<R>.json``: for each loader, its start and end (ns since the epoch) and per file the tensors
and bytes this rank read from storage (from the files' own headers, parsed here: no loadtrace, no safetensors), plus
the bytes ``torch.distributed.broadcast`` sent and received during it (a plain wrapper around whatever that name holds,
loadtrace's hook included). Between loaders it sleeps past ``LOADTRACE_LOAD_IDLE``, so each is a load of its own.

The iterators are the engines' own functions, reproduced faithfully (progress bars left out):

- ``vllm_lazy``: vLLM ``safetensors_weights_iterator`` (``vllm/model_executor/model_loader/weight_utils.py``, strategy
  "lazy"): ``safe_open`` per file, ``get_tensor`` per key;
- ``vllm_eager``: the same function's "eager" strategy: ``safetensors.torch.load(f.read())`` per file;
- ``vllm_threads``: vLLM ``multi_thread_safetensors_weights_iterator``: ``load_file`` per file in a
  ``ThreadPoolExecutor(max_workers=4)``, consumed with ``as_completed``;
- ``sglang_no_mmap``: SGLang ``multi_thread_safetensors_weights_iterator`` with ``disable_mmap=True``
  (``python/sglang/srt/model_loader/weight_utils.py``): ``open(f, "rb")`` + ``safetensors.torch.load(f.read())`` in the
  thread pool;
- ``fastsafetensors``: vLLM ``fastsafetensors_weights_iterator``: the files in batches of the world size, a
  ``SafeTensorsFileLoader(pg, device, nogds=True)`` per batch, ``add_filenames({rank: [file]})``,
  ``copy_files_to_device()``, ``get_tensor`` for every key, ``fb.close()``, ``loader.close()``;
- ``runai``: vLLM ``runai_safetensors_weights_iterator``: ``SafetensorsStreamer().stream_files(files)`` then
  ``get_tensors()`` (with ``--runai-distributed``: ``is_distributed=True``, ``RUNAI_STREAMER_DIST=1`` for gloo).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import struct
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def header(path: str) -> dict[str, int]:
    """Each tensor's bytes, from the file's own header."""
    with open(path, "rb", buffering=0) as handle:  # unbuffered: not a read to count (a header, not weights)
        length = struct.unpack("<Q", handle.read(8))[0]
        meta = json.loads(handle.read(length))
    meta.pop("__metadata__", None)
    return {name: entry["data_offsets"][1] - entry["data_offsets"][0] for name, entry in meta.items()}


class Count:
    def __init__(self, files: list[str]):
        self.headers = {path: header(path) for path in files}
        self.owner = {name: path for path, names in self.headers.items() for name in names}
        self.files: dict[str, dict[str, int]] = {}
        self.sent = self.received = 0

    def read_file(self, path: str) -> None:
        """This rank read the whole of ``path``'s tensors from storage."""
        sizes = self.headers[path]
        self.files[path] = {"tensors": len(sizes), "bytes": sum(sizes.values())}

    def read_tensor(self, name: str, tensor: Any) -> None:
        entry = self.files.setdefault(self.owner[name], {"tensors": 0, "bytes": 0})
        entry["tensors"] += 1
        entry["bytes"] += int(tensor.nbytes)


COUNT: Count | None = None


def counting_broadcast(original: Any) -> Any:
    def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
        result = original(tensor, src=src, group=group, async_op=async_op, group_src=group_src)
        if COUNT is not None:
            source = src if src is not None else dist.get_global_rank(group or dist.group.WORLD, group_src)
            if source == dist.get_rank():
                COUNT.sent += int(tensor.nbytes)
            else:
                COUNT.received += int(tensor.nbytes)
        return result

    return broadcast


def vllm_lazy(files: list[str], count: Count) -> None:
    from safetensors import safe_open

    for st_file in files:
        with safe_open(st_file, framework="pt") as f:
            for name in f.keys():  # noqa: SIM118
                param = f.get_tensor(name)
                count.read_tensor(name, param)


def vllm_eager(files: list[str], count: Count) -> None:
    from safetensors.torch import load

    for st_file in files:
        with open(st_file, "rb") as f:
            state_dict = load(f.read())
        for name, param in state_dict.items():
            count.read_tensor(name, param)


def vllm_threads(files: list[str], count: Count) -> None:
    from safetensors.torch import load_file

    def _load_file(st_file: str):
        return load_file(st_file, device="cpu")

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        futures = [executor.submit(_load_file, st_file) for st_file in files]
        for future in concurrent.futures.as_completed(futures):
            for name, param in future.result().items():
                count.read_tensor(name, param)


def sglang_no_mmap(files: list[str], count: Count) -> None:
    import safetensors.torch

    def _load_file(st_file: str):
        with open(st_file, "rb") as f:
            result = safetensors.torch.load(f.read())
        return st_file, result

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as executor:
        futures = [executor.submit(_load_file, st_file) for st_file in files]
        for future in concurrent.futures.as_completed(futures):
            _, state_dict = future.result()
            for name, param in state_dict.items():
                count.read_tensor(name, param)


def fastsafetensors(files: list[str], count: Count) -> None:
    from fastsafetensors import SafeTensorsFileLoader, SingleGroup

    pg = dist.group.WORLD if dist.is_initialized() else SingleGroup()
    for f_list in [files[i : i + pg.size()] for i in range(0, len(files), pg.size())]:
        loader = SafeTensorsFileLoader(pg, "cpu", nogds=True)
        rank_file_map = {i: [f] for i, f in enumerate(f_list)}
        loader.add_filenames(rank_file_map)
        if pg.rank() in rank_file_map:
            count.read_file(rank_file_map[pg.rank()][0])
        try:
            fb = loader.copy_files_to_device()
            try:
                for k in list(fb.key_to_rank_lidx.keys()):
                    fb.get_tensor(k)
            finally:
                fb.close()
        finally:
            loader.close()


def runai(files: list[str], count: Count, distributed: bool = False) -> None:
    from runai_model_streamer import SafetensorsStreamer

    with SafetensorsStreamer() as streamer:
        streamer.stream_files(files, is_distributed=distributed)
        for name, tensor in streamer.get_tensors():
            if not distributed:
                count.read_tensor(name, tensor)
    if distributed:  # what this rank read itself: its share of the streamer's partition (rank_file_chunks_list)
        inner = streamer.file_streamer.distributed_streamer
        for chunks in inner.rank_file_chunks_list:
            for original in inner.rank_dicts_map[chunks.id].values():
                meta = streamer.files_to_tensors_metadata[original[0]][original[1]]
                entry = count.files.setdefault(files[original[0]], {"tensors": 0, "bytes": 0})
                entry["tensors"] += 1
                entry["bytes"] += meta.get_bytesize()


LOADERS = {
    "vllm_lazy": vllm_lazy,
    "vllm_eager": vllm_eager,
    "vllm_threads": vllm_threads,
    "sglang_no_mmap": sglang_no_mmap,
    "fastsafetensors": fastsafetensors,
    "runai": runai,
}


def main() -> None:
    global COUNT
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--out", required=True)
    parser.add_argument("--loaders", default=",".join(LOADERS))
    parser.add_argument("--runai-distributed", action="store_true")
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between loaders (far past LOADTRACE_LOAD_IDLE)")
    args = parser.parse_args()
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    files = sorted(glob.glob(os.path.join(args.checkpoint, "*.safetensors")))
    torch.distributed.broadcast = counting_broadcast(torch.distributed.broadcast)
    record: dict[str, Any] = {"rank": rank, "loaders": {}}
    for name in args.loaders.split(","):
        if dist.is_initialized():
            dist.barrier()
        time.sleep(args.gap)
        COUNT = count = Count(files)
        started = time.time_ns()
        if name == "runai":
            runai(files, count, args.runai_distributed)
        else:
            LOADERS[name](files, count)
        record["loaders"][name] = {
            "start_ns": started,
            "end_ns": time.time_ns(),
            "files": count.files,
            "broadcast_sent": count.sent,
            "broadcast_received": count.received,
        }
        COUNT = None
    time.sleep(args.gap)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"stream-rank{rank}.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
