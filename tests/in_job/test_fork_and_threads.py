"""Promise: forked children (multiprocessing pools, DataLoader workers) trace into files of their own, neither
duplicating nor losing spans, without deadlock; threads loading at once are each charged their own bytes."""

import threading

import safetensors
import safetensors.torch
import torch
from support.inmemory import traced

import loadtrace


def test_concurrent_loads_in_threads_are_charged_separately(tmp_path):
    sizes = {"small": 10, "large": 1000}
    paths = {}
    for name, n in sizes.items():
        paths[name] = tmp_path / f"{name}.safetensors"
        safetensors.torch.save_file({"w": torch.ones(n)}, str(paths[name]))
    barrier = threading.Barrier(2)

    def load(name):
        with loadtrace.traced_load(name):
            barrier.wait()
            for _ in range(20):
                with safetensors.safe_open(str(paths[name]), framework="pt") as f:
                    f.get_tensor("w")
                torch.zeros_like(torch.ones(sizes[name]))

    with traced() as t:
        threads = [threading.Thread(target=load, args=(name,)) for name in sizes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for span in t.spans("loadtrace.load"):
        n = sizes[span.attributes["loadtrace.load.name"]]
        assert span.attributes["loadtrace.read.bytes"] == 20 * 4 * n
        assert span.attributes["loadtrace.materialized.bytes.cpu"] == 20 * 4 * n
        assert span.attributes["loadtrace.files.opened"] == 1  # one file, opened 20 times
