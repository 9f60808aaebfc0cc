"""Promise (issue 49, docs/reference.md: ``loadtrace.workload``): a process says what kind of job it showed itself to
be, from what is cheap to see: a sign of training (an optimizer constructed, ``deepspeed.initialize``, TRL or
Lightning imported) makes it ``training``; without one it is ``inference``, naming the serving engine it imported.
The load and startup spans carry it at their end; the first sign of training after the startup ended (an optimizer
made after the load, as most training jobs do) is a ``loadtrace.training_sign`` span of its own, once."""

from __future__ import annotations

import sys
import types

import safetensors.torch
import torch
from support.inmemory import traced

import loadtrace
from loadtrace import semconv


def load_a_file(path) -> None:
    with loadtrace.traced_load("weights"):
        with safetensors.safe_open(str(path), framework="pt") as handle:
            handle.get_tensor("w")


def test_an_optimizer_made_after_the_load_is_a_training_sign_of_its_own(tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(4)}, str(path))
    with traced() as t:
        load_a_file(path)  # no preparation follows: the startup ends with the load
        weights = [torch.nn.Parameter(torch.ones(2))]
        torch.optim.SGD(weights, lr=0.1)
        torch.optim.AdamW(weights)  # a second sign: no second span
    for name in (semconv.SPAN_LOAD, semconv.SPAN_STARTUP):
        span = t.one(name)
        assert span.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_INFERENCE, name
        assert semconv.WORKLOAD_EVIDENCE not in span.attributes and semconv.SERVING_ENGINE not in span.attributes
    sign = t.one(semconv.SPAN_TRAINING_SIGN)
    assert sign.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_TRAINING
    assert tuple(sign.attributes[semconv.WORKLOAD_EVIDENCE]) == ("optimizer SGD",)
    assert sign.start_time >= t.one(semconv.SPAN_STARTUP).end_time


def test_a_sign_before_the_load_is_on_the_load_and_the_startup(tmp_path):
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(4)}, str(path))
    with traced() as t:
        torch.optim.Adam([torch.nn.Parameter(torch.ones(2))])
        load_a_file(path)
    for name in (semconv.SPAN_LOAD, semconv.SPAN_STARTUP):
        span = t.one(name)
        assert span.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_TRAINING, name
        assert tuple(span.attributes[semconv.WORKLOAD_EVIDENCE]) == ("optimizer Adam",)
    assert t.spans(semconv.SPAN_TRAINING_SIGN) == []


def test_a_serving_engine_is_named_and_a_training_framework_is_a_sign(tmp_path, monkeypatch):
    """Only the import is looked at (``sys.modules``): vLLM and TRL are not installed here."""
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.ones(4)}, str(path))
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    with traced() as t:
        load_a_file(path)
    load = t.one(semconv.SPAN_LOAD)
    assert load.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_INFERENCE
    assert load.attributes[semconv.SERVING_ENGINE] == "vllm"
    assert tuple(load.attributes[semconv.WORKLOAD_EVIDENCE]) == ("vllm imported",)
    monkeypatch.setitem(sys.modules, "trl", types.ModuleType("trl"))
    with traced() as t:
        load_a_file(path)
    load = t.one(semconv.SPAN_LOAD)
    assert load.attributes[semconv.WORKLOAD] == semconv.WORKLOAD_TRAINING
    assert tuple(load.attributes[semconv.WORKLOAD_EVIDENCE]) == ("trl imported",)


def test_uninstrumented_an_optimizer_is_untouched():
    with traced():
        pass
    weights = [torch.nn.Parameter(torch.ones(2))]
    optimizer = torch.optim.SGD(weights, lr=0.5)
    assert type(optimizer).__init__ is torch.optim.SGD.__init__
    assert "__wrapped__" not in vars(torch.optim.Optimizer)["__init__"].__dict__
