"""Promise: what a load pays on its own thread does not grow with its phases: memory is read there twice per load
(its start and end, exact), phase boundaries are read by the monitor thread; the first span's resource costs no
``importlib.metadata`` lookups, and names the same library versions."""

import threading
from importlib import metadata

from support.inmemory import traced
from transformers import AutoModelForCausalLM

from loadtrace import semconv
from loadtrace.instrumentation import context
from loadtrace.instrumentation.counting import memory, readings
from loadtrace.instrumentation.tracing import lifecycle, loose, phasing, startup


def test_memory_is_read_on_the_loading_thread_only_at_the_loads_start_and_end(tiny_checkpoint, monkeypatch):
    checkpoint, _ = tiny_checkpoint
    readers = []
    original = memory.process_memory

    def counted():
        readers.append(threading.current_thread().name)
        return original()

    for module in (phasing, loose, readings, startup, lifecycle):  # where spans.py's readings are since it was split
        monkeypatch.setattr(module, "process_memory", counted)
    with traced() as t:
        AutoModelForCausalLM.from_pretrained(checkpoint)
        AutoModelForCausalLM.from_pretrained(checkpoint)
    loads = t.spans(semconv.SPAN_FROM_PRETRAINED)
    phases = [s for s in t.spans() if s.name in semconv.PHASE_SPANS]
    assert len(loads) == 2 and phases
    assert readers == [threading.current_thread().name] * 4
    for span in [*loads, *phases]:
        attributes = span.attributes
        assert attributes[semconv.RSS_BEFORE] > 0 and attributes[semconv.RSS_AFTER] > 0, span.name
        assert attributes[semconv.RSS_PEAK] >= max(attributes[semconv.RSS_BEFORE], attributes[semconv.RSS_AFTER])


def test_library_versions_are_the_installed_ones_without_metadata_lookups(monkeypatch):
    expected = {}
    for name in context.HOOKED_LIBRARIES:
        try:
            expected[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass

    def refused(*args, **kwargs):
        raise AssertionError("an importlib.metadata lookup")

    monkeypatch.setattr(metadata, "version", refused)
    monkeypatch.setattr(metadata, "distribution", refused)
    # An imported library reports its ``__version__``, which may carry a local tag its metadata lacks (PyPI's Linux
    # torch: ``2.13.0+cu130`` against ``2.13.0``).
    public = {name: version.split("+")[0] for name, version in context.library_versions().items()}
    assert public == expected
    names = [name for name in context.HOOKED_LIBRARIES if name in expected]
    assert context.installed_versions(names) == expected  # the same for libraries not imported yet
