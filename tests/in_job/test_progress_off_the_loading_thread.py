"""Promise: the live fields and the progress metrics cost the loading thread nothing: the monitor thread samples and
writes them, the metrics SDK's own reader thread observes them from the state file, and the metrics SDK is built from
the monitor thread at a load's first sample."""

import threading

from support.inmemory import traced
from transformers import AutoModelForCausalLM, core_model_loading

from loadtrace.instrumentation.exporting import progress, progress_metrics


def test_progress_runs_off_the_loading_thread(tiny_checkpoint, monkeypatch):
    checkpoint, _ = tiny_checkpoint
    threads: dict[str, set[str]] = {"sample": set(), "built": set(), "observed": set()}

    def recorded(where, original):
        def call(*args, **kwargs):
            threads[where].add(threading.current_thread().name)
            return original(*args, **kwargs)

        return call

    metrics = progress_metrics.ProgressMetrics
    monkeypatch.setattr(progress.Progress, "sample", recorded("sample", progress.Progress.sample))
    monkeypatch.setattr(metrics, "__init__", recorded("built", metrics.__init__))
    monkeypatch.setattr(metrics, "_read_bytes", recorded("observed", metrics._read_bytes))
    slow = core_model_loading._materialize_copy

    def slowly(*args, **kwargs):
        threading.Event().wait(0.05)  # a second or so of loading: samples and collections happen meanwhile
        return slow(*args, **kwargs)

    monkeypatch.setattr(core_model_loading, "_materialize_copy", slowly)
    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "1")
    # An endpoint nobody listens on: what is measured is where the work runs, not whether the export lands.
    with traced(otlp_endpoint="http://127.0.0.1:9", progress_interval_s=0.2, exit_timeout_s=0.5):
        AutoModelForCausalLM.from_pretrained(checkpoint)
    loading = threading.current_thread().name
    assert threads["sample"] == {"loadtrace-monitor"}
    assert threads["built"] == {"loadtrace-monitor"}
    assert threads["observed"] and loading not in threads["observed"]
