"""from_pretrained: one load span with exact totals, one span per file, phases aggregated, bounded span count."""

import pytest
import torch
from support.examples import make_checkpoint
from support.inmemory import traced


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt")
    return path, make_checkpoint(path)


def test_from_pretrained_totals_equal_the_checkpoint(checkpoint):
    from transformers import AutoModelForCausalLM

    path, summary = checkpoint
    with traced() as t:
        model = AutoModelForCausalLM.from_pretrained(path)
    load = t.one("transformers.from_pretrained")
    files = t.spans("safetensors.open")
    assert len(summary["files"]) >= 3
    assert len(files) == load.attributes["loadtrace.files.opened"] == len(summary["files"])
    assert load.attributes["loadtrace.read.tensors"] == summary["tensors"]
    assert (
        load.attributes["loadtrace.read.bytes"]
        == summary["bytes"]
        == sum(f.attributes["loadtrace.read.bytes"] for f in files)
    )
    assert load.attributes["loadtrace.strategy"] == "plain"
    assert load.attributes["loadtrace.model.class"] == "Qwen3MoeForCausalLM"
    assert load.attributes["loadtrace.checkpoint"] == str(path)
    assert load.attributes["loadtrace.checkpoint.bytes"] == sum(f.stat().st_size for f in path.glob("*.safetensors"))
    held = sum(t.nbytes for t in (*model.parameters(), *model.buffers()))
    assert load.attributes["loadtrace.model.held_bytes.cpu"] == held
    assert load.attributes["loadtrace.rss.peak"] >= load.attributes["loadtrace.rss.after"] > 0
    assert load.attributes["loadtrace.hook_errors"] == 0
    assert all(f.parent.span_id == load.context.span_id for f in files)


def test_conversion_counts_only_parameters_that_were_converted(checkpoint):
    """A parameter loaded under its checkpoint name was not converted (transformers still makes a ``WeightRenaming``
    for it); one that no checkpoint key names (merged experts) was, once, with its bytes."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    path, summary = checkpoint
    with traced() as t:
        model = AutoModelForCausalLM.from_pretrained(path)
    convert = t.one("transformers.convert")
    assert convert.attributes["loadtrace.calls"] == 1
    keys = set()
    for file in path.glob("*.safetensors"):
        with safe_open(str(file), "pt") as handle:
            keys |= set(handle.keys())
    converted = {name: p for name, p in model.named_parameters() if name not in keys}
    assert converted, "the tiny MoE merges its experts on load"
    assert convert.attributes["loadtrace.convert.count"] == len(converted)
    assert convert.attributes["loadtrace.convert.bytes"] == sum(p.nbytes for p in converted.values())
    ops = {k.split(".")[3] for k in convert.attributes if k.startswith("loadtrace.convert.op.")}
    assert "MergeModulelist" in ops and "Rename" not in ops  # experts are merged on load in transformers 5


def test_span_count_is_bounded_by_files_not_tensors(checkpoint):
    from transformers import AutoModelForCausalLM

    path, summary = checkpoint
    with traced() as t:
        AutoModelForCausalLM.from_pretrained(path)
    assert len(t.spans()) <= len(summary["files"]) + 20
    assert summary["tensors"] > len(summary["files"]) + 20


def test_weights_are_identical_with_and_without_tracing(checkpoint):
    from transformers import AutoModelForCausalLM

    path, _ = checkpoint
    plain = AutoModelForCausalLM.from_pretrained(path).state_dict()
    with traced(detail="tensor"):
        traced_state = AutoModelForCausalLM.from_pretrained(path).state_dict()
    assert plain.keys() == traced_state.keys()
    assert all(torch.equal(plain[k], traced_state[k]) for k in plain)


def test_the_load_span_carries_the_checkpoints_exact_tensor_bytes(checkpoint):
    from transformers import AutoModelForCausalLM

    path, summary = checkpoint
    with traced() as t:
        AutoModelForCausalLM.from_pretrained(path, device_map="cpu")
    load = t.one("transformers.from_pretrained")
    assert load.attributes["loadtrace.checkpoint.tensor_bytes"] == summary["bytes"]
    assert load.attributes["loadtrace.device_map"] == "cpu" and "loadtrace.tp_plan" not in load.attributes


@pytest.mark.parametrize(
    ("environment", "kwargs", "expected"),
    [
        ({}, {}, "plain"),
        ({}, {"tp_plan": "auto"}, "tp"),
        ({"ACCELERATE_USE_FSDP": "true"}, {}, "fsdp"),
        ({"ACCELERATE_USE_FSDP": "true"}, {"tp_plan": "auto"}, "fsdp+tp"),
        ({"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}, {}, "fsdp_cpu_ram_efficient"),
        (
            {"ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"},
            {"tp_plan": "auto"},
            "fsdp_cpu_ram_efficient+tp",
        ),
    ],
)
def test_strategy_names_tensor_parallelism_and_its_combinations(monkeypatch, environment, kwargs, expected):
    from loadtrace.instrumentation.hooks.transformers import strategy

    for name in ("ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert strategy(kwargs) == expected


def test_a_rename_counts_only_when_the_key_changes():
    from transformers.core_model_loading import WeightRenaming

    from loadtrace.instrumentation.hooks.transformers import renames

    assert not renames(WeightRenaming("model.norm.weight", "model.norm.weight"))
    assert renames(WeightRenaming("transformer.norm.weight", "model.norm.weight"))


def test_the_index_total_is_read_from_its_head_and_equals_a_full_parse(checkpoint, tmp_path):
    """Before the load only the index's ``metadata.total_size`` is wanted: read from the file's first bytes when it
    opens with it (transformers writes it so), else from the whole JSON; the same number either way."""
    import json

    from loadtrace.instrumentation.hooks.transformers import _total_size_ahead, checkpoint_tensor_bytes

    path, summary = checkpoint
    index = path / "model.safetensors.index.json"
    content = json.loads(index.read_text())
    assert _total_size_ahead(str(index)) == content["metadata"]["total_size"] == summary["bytes"]
    assert checkpoint_tensor_bytes(path, {}, headers=False) == summary["bytes"]
    # Written the other way round (weight map first): nothing ahead, the whole file is parsed.
    turned = tmp_path / "turned"
    turned.mkdir()
    (turned / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": content["weight_map"], "metadata": content["metadata"]}, indent=2)
    )
    assert _total_size_ahead(str(turned / "model.safetensors.index.json")) is None
    assert checkpoint_tensor_bytes(turned, {}, headers=False) == summary["bytes"]


def test_held_bytes_count_each_tensor_once_by_device():
    """Tied weights are one tensor; parameters and buffers by device type, against ``parameters()``/``buffers()``."""
    from loadtrace.instrumentation.hooks.transformers import held_bytes

    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10), torch.nn.BatchNorm1d(10))
    model[1].weight = model[0].weight  # tied, as an LM head and its embeddings
    model[2].to("meta")
    expected: dict[str, int] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        expected[tensor.device.type] = expected.get(tensor.device.type, 0) + tensor.nbytes
    assert held_bytes(model, partitioned=False) == expected
    assert expected["cpu"] == (10 * 4 + 10) * 4 and expected["meta"] > 0


def test_a_renaming_hook_counts_a_changed_key_and_passes_a_kept_one():
    """``WeightRenaming.convert`` runs once per checkpoint key no converter takes: a kept key passes at once, a changed
    one is a ``Rename`` conversion, and outside a load nothing is looked at."""
    from transformers.core_model_loading import WeightRenaming

    import loadtrace
    from loadtrace import semconv
    from loadtrace.instrumentation.hooks.transformers import weight_renaming

    kept = WeightRenaming("model.norm.weight", "model.norm.weight")
    changed = WeightRenaming("transformer.norm.weight", "model.norm.weight")
    with traced():
        assert weight_renaming(changed, (), {}) is None  # no load open
        with loadtrace.traced_load("renames"):
            assert weight_renaming(kept, (), {}) is None
            assert weight_renaming(changed, (), {}).operations == (semconv.RENAME_OP,)


def _checkpoint_state_dict(path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        state.update(load_file(str(file)))
    return state


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_zero3s_conversions_count_on_the_load_and_meta_outputs_count_0_bytes(checkpoint, device):
    """ZeRO-3's path (``integrations.deepspeed._apply_weight_conversions_to_state_dict``, outside
    ``convert_and_load_state_dict_in_model``) converts through the same ``WeightConverter.convert``: each conversion
    counts once on the load; a rank that converts ``meta`` tensors (5.24's ZeRO-3 rank 1) converts 0 B."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.integrations.deepspeed import _apply_weight_conversions_to_state_dict

    import loadtrace

    path, _ = checkpoint
    state = _checkpoint_state_dict(path)
    state = {key: tensor.to(device) for key, tensor in state.items()}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    converted = {name: p for name, p in model.named_parameters() if name not in state}
    assert converted, "the tiny MoE merges its experts on load"
    with traced() as t:
        with loadtrace.traced_load("zero3-like"):
            result = _apply_weight_conversions_to_state_dict(model, state, get_model_conversion_mapping(model))
            produced = [result] if isinstance(result, dict) else list(result)  # 5.24: a generator
    load = t.one("loadtrace.load")
    outputs = {name: tensor for part in produced for name, tensor in part.items() if name in converted}
    assert set(outputs) == set(converted)
    assert load.attributes["loadtrace.convert.count"] == len(converted)
    real = sum(p.nbytes for p in converted.values()) if device == "cpu" else 0
    assert load.attributes["loadtrace.convert.bytes"] == real
    assert load.attributes["loadtrace.hook_errors"] == 0


def test_a_local_checkpoint_is_named_by_its_resolved_path_a_hub_id_as_given(checkpoint, tmp_path, monkeypatch):
    """``mistral`` from its parent folder, ``../mistral`` from a sibling and a symlink to it are one model to
    ``jobs --group-by model``: ``loadtrace.checkpoint`` is the resolved path of a local checkpoint."""
    from transformers import AutoModelForCausalLM

    from loadtrace.instrumentation.hooks._common import checkpoint_path

    path, _ = checkpoint
    (tmp_path / "sibling").mkdir()
    (tmp_path / "link").symlink_to(path)
    named = []
    for cwd, given in ((path.parent, path.name), (tmp_path / "sibling", "../link")):
        monkeypatch.chdir(cwd)
        with traced() as t:
            AutoModelForCausalLM.from_pretrained(given)
        named.append(t.one("transformers.from_pretrained").attributes["loadtrace.checkpoint"])
    assert named == [str(path.resolve())] * 2
    assert checkpoint_path("mistralai/Mistral-7B-v0.1") == "mistralai/Mistral-7B-v0.1"


@pytest.fixture
def shard(tmp_path):
    """A safetensors file of two float32 tensors of 48 and 40 bytes."""
    from safetensors.torch import save_file

    path = tmp_path / "shard.safetensors"
    save_file({"a": torch.arange(12, dtype=torch.float32), "b": torch.ones(10)}, str(path))
    return str(path)


@pytest.mark.parametrize(
    ("device", "dtype", "cast"),
    [
        (None, None, 0),
        ("cpu", torch.float32, 0),  # a CPU load in the checkpoint's dtype: every tensor of one
        (torch.device("cpu"), torch.float32, 0),
        ("cpu:0", None, 0),
        ("cpu", torch.float16, 24),  # cast: the bytes it made
        ("meta", None, 48),  # a device copy (``cuda:0`` on an accelerator), timed the same way
        (torch.device("meta"), torch.float32, 48),
    ],
)
def test_materialize_copy_times_only_a_cast_or_a_device_copy(shard, device, dtype, cast):
    """``_materialize_copy`` is hooked by a plain function of loadtrace's (once per tensor): what it returns is what
    transformers' own returns; a read that keeps its dtype on the CPU passes untimed, a cast or a device copy is
    counted with the bytes it made; the read counts exactly either way."""
    import safetensors
    from transformers import core_model_loading

    import loadtrace
    from loadtrace import semconv

    original = core_model_loading._materialize_copy
    expected = original(safetensors.safe_open(shard, framework="pt").get_slice("a"), device, dtype)
    with traced() as t:
        assert core_model_loading._materialize_copy is not original
        with loadtrace.traced_load("materialize"):
            handle = safetensors.safe_open(shard, framework="pt")
            found = core_model_loading._materialize_copy(handle.get_slice("a"), device, dtype)
    assert (found.dtype, found.device, found.shape) == (expected.dtype, expected.device, expected.shape)
    if found.device.type != "meta":
        assert torch.equal(found, expected)
    load = t.one("loadtrace.load").attributes
    assert load.get(semconv.CAST_COUNT, 0) == (1 if cast else 0) and load.get(semconv.CAST_BYTES, 0) == cast
    assert (load[semconv.READ_TENSORS], load[semconv.READ_BYTES]) == (1, 48)


def test_materialize_copy_of_a_tensor_and_its_faults(shard):
    """A tensor (a ``.bin`` checkpoint's, not a slice) is cast-checked the general way and charged to the open load;
    a slice whose checks fail is a fault, counted once on the load, and the call goes ahead with transformers' own
    result."""
    from transformers import core_model_loading

    import loadtrace
    from loadtrace import semconv
    from loadtrace.instrumentation.hooks.safetensors import CountingSlice
    from loadtrace.instrumentation.tracing import spans

    class Broken:  # a library slice whose dtype cannot be asked
        def get_dtype(self):
            raise RuntimeError("no dtype")

        def __getitem__(self, index):
            return torch.ones(4)

    with traced() as t:
        with loadtrace.traced_load("tensor"):
            cast = core_model_loading._materialize_copy(torch.ones(4), "cpu", torch.float16)
            piece = CountingSlice()
            piece._slice, piece._slot, piece._scope = Broken(), spans.detached_slot(), None
            kept = core_model_loading._materialize_copy(piece, "cpu", torch.float32)
    assert cast.dtype == torch.float16 and torch.equal(kept, torch.ones(4))
    load = t.one("loadtrace.load").attributes
    assert (load[semconv.CAST_COUNT], load[semconv.CAST_BYTES]) == (1, 8)
    assert load[semconv.HOOK_ERRORS] == 1


def test_renaming_counts_a_changed_key_through_its_plain_function():
    """``WeightRenaming.convert`` (every key no converter takes) is hooked by a plain function of the same
    signature: a kept key passes as transformers' own call, a changed one is one ``Rename`` conversion."""
    from transformers.core_model_loading import WeightRenaming

    import loadtrace
    from loadtrace import semconv
    from loadtrace.instrumentation.hooks import registry

    kept = WeightRenaming("model.norm.weight", "model.norm.weight")
    changed = WeightRenaming("transformer.norm.weight", "model.norm.weight")
    for renaming in (kept, changed):
        source = renaming.source_patterns[0]
        renaming.add_tensor("model.norm.weight", source, source, torch.ones(3))
    with traced() as t:
        assert registry.ours(vars(WeightRenaming)["convert"])
        with loadtrace.traced_load("renames"):
            assert list(kept.convert("model.norm.weight")) == ["model.norm.weight"]
            assert list(changed.convert("model.norm.weight", model=None)) == ["model.norm.weight"]
    load = t.one("loadtrace.load").attributes
    assert load[semconv.CONVERT_COUNT] == 1 and load[semconv.convert_op_key(semconv.RENAME_OP, "count")] == 1


def test_a_release_whose_targets_take_other_arguments_keeps_the_generic_wrapper():
    """The plain functions are written for 5.12's and 5.24's signatures; any other gets wrapt's wrapper and the
    generic handler, as every other hook."""
    from loadtrace.instrumentation.hooks.transformers import inline_materialize_copy, inline_renaming

    def materialize(tensor, device=None, dtype=None, non_blocking=False):
        return tensor

    def convert(self, layer_name, model=None, config=None, **kwargs):
        return {}

    assert inline_materialize_copy(materialize) is None and inline_renaming(convert) is None
    assert callable(inline_materialize_copy(lambda tensor, device=None, dtype=None: tensor))
