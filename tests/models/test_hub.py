"""Hub loading, offline: a temporary Hugging Face cache holding tiny Llasa stand-ins under the
real repo ids, pre-flight errors that fail before any weights load, presets and custom pairs."""

from __future__ import annotations

from support.paths import REPOSITORY

import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from support.llasa_fixtures import (  # noqa: E402
                            build_llasa_family,
                            build_llama,
                            build_tokenizer,
                            install_in_hub_cache,
                            rename_tensors,
                            save_causal_lm,
                            )

from ssd_demo.models import hub, memory as model_memory, weights
from ssd_demo.backends import registry as presets  # noqa: E402
from ssd_demo.backends.builtin_presets import LLASA_1B, LLASA_3B  # noqa: E402
from ssd_demo.backends import llasa_loading  # noqa: E402
from ssd_demo.backends.llasa_loading import (  # noqa: E402
                                             DEFAULT_CODEC,
                                             DEFAULT_CODEC_REVISION,
                                             load_custom_pair,
                                             load_llasa_pair,
                                             )
from ssd_demo.errors import (IncompatiblePairError, ModelLoadError, ModelNotFoundError, ModelUnavailableError,
                             NotACausalLMError)
from ssd_demo.models.hub import LoadOptions
from ssd_demo.models.memory import InsufficientMemoryError  # noqa: E402

CPU = LoadOptions(device="cpu")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield
    presets.unload()


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return build_llasa_family(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def hub_cache(family, tmp_path_factory):
    """A Hub cache with the tiny family installed under the preset repo ids (3B only, not 8B)."""
    cache = tmp_path_factory.mktemp("hf-cache")
    install_in_hub_cache(family.target, cache, LLASA_3B)
    install_in_hub_cache(family.draft, cache, LLASA_1B)
    install_in_hub_cache(family.codec, cache, DEFAULT_CODEC, revision=DEFAULT_CODEC_REVISION)
    return cache


def pair(family, draft, **kwargs):
    return load_llasa_pair(str(family.target), str(draft), codec_ref=str(family.codec), options=CPU, **kwargs)


def test_offline_flag_is_read_at_call_time(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert hub.is_offline() is False
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.is_offline() is True
    assert hub.is_offline(False) is False


def test_auto_device_and_dtype():
    assert hub.auto_dtype(torch.device("cpu")) == torch.float32
    assert hub.auto_dtype(torch.device("cpu"), torch.bfloat16) == torch.bfloat16
    assert hub.auto_device("cpu").type == "cpu"
    # CUDA: bfloat16 where supported, else float16 (checked without a GPU by asking the stubs).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
        assert hub.auto_dtype(torch.device("cuda")) == torch.bfloat16
        patch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
        assert hub.auto_dtype(torch.device("cuda")) == torch.float16
    if not torch.cuda.is_available():
        assert hub.auto_device().type == "cpu"


def test_presets_listed_with_labels_and_licences():
    listed = presets.list_presets()
    assert listed[0].key == "embedded"
    keys = [p.key for p in listed]
    assert "llasa-1b-3b" in keys and "llasa-1b-8b" in keys
    for key, size in (("llasa-1b-3b", "3B"), ("llasa-1b-8b", "8B")):
        preset = presets.get_preset(key)
        assert preset.needs_download and "CC-BY-NC-4.0" in preset.licence
        assert f"Llasa-{size}" in preset.label and "Llasa-1B" in preset.label
        assert preset.drafts == ("Llasa-1B",) and preset.sample_rate == 16_000
        assert preset.repos[1] == LLASA_1B and preset.revision
    assert ("Embedded voice (offline, CPU)", "embedded") == presets.preset_choices()[0]


def test_preset_loads_offline_from_cache(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    available, message = presets.preset_availability("llasa-1b-3b")
    assert available, message
    seen = []
    synth = presets.load_preset("llasa-1b-3b", device="cpu", progress=lambda f, m: seen.append(f))
    assert synth.draft_name == "Llasa-1B"
    assert presets.load_preset("llasa-1b-3b", device="cpu") is synth  # stays resident
    fractions = seen
    assert fractions[-1] == 1.0 and fractions == sorted(fractions)
    result = synth.synthesize("Hello.", mode="speculative", config=synth.config(max_new_tokens=8, seed=1))
    assert result.sample_rate == 16_000


def test_unavailable_preset_fails_fast_saying_how_to_get_it(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    available, message = presets.preset_availability("llasa-1b-8b")
    assert not available and "hf download HKUSTAudio/Llasa-8B" in message
    monkeypatch.setattr(llasa_loading, "load_causal_lm", _must_not_load)
    with pytest.raises(ModelUnavailableError, match=r"hf download HKUSTAudio/Llasa-8B.*HF_HUB_CACHE"):
        presets.load_preset("llasa-1b-8b", device="cpu")


def test_all_missing_models_reported_together(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing is available
    with pytest.raises(ModelUnavailableError) as caught:
        presets.load_preset("llasa-1b-8b", device="cpu")
    message = str(caught.value)
    assert message.startswith("3 models are not available")
    commands = ("hf download HKUSTAudio/Llasa-8B && hf download HKUSTAudio/Llasa-1B && "
                f"hf download HKUSTAudio/xcodec2-hf --revision {DEFAULT_CODEC_REVISION}")
    assert f"`{commands}`" in message


def test_nonexistent_repo_offline(tmp_path):
    with pytest.raises(ModelUnavailableError, match="not in the local Hugging Face cache and offline mode is on"):
        hub.resolve("nobody-here/no-such-model", options=LoadOptions(cache_dir=tmp_path))


@pytest.mark.parametrize("ref", ["./no/such/dir", "/definitely/not/here", "not a repo id!!"])
def test_bad_references(ref):
    with pytest.raises(ModelNotFoundError):
        hub.resolve(ref)


def test_custom_pair_from_cached_repo_ids(hub_cache, family):
    synth = presets.load_custom_pair(
        LLASA_3B, LLASA_1B, device="cpu", codec_ref=DEFAULT_CODEC, cache_dir=hub_cache
    )
    assert synth.draft_name == "Llasa-1B"
    assert list(presets._resident) and len(presets._resident) == 1


def test_custom_pair_from_local_folders(family):
    synth = load_custom_pair(str(family.target), str(family.draft), codec_ref=str(family.codec), device="cpu")
    assert synth.backend.name == "llasa"
    assert next(synth.target.parameters()).dtype == torch.float32


def test_mismatched_vocabularies_rejected(family, tmp_path):
    other = save_causal_lm(tmp_path / "other", build_tokenizer(extra_speech_tokens=200), layers=1, seed=3)
    with pytest.raises(IncompatiblePairError, match="vocabularies differ"):
        pair(family, other)


def test_shifted_special_token_ids_rejected(family, tmp_path):
    shifted = save_causal_lm(tmp_path / "shifted", build_tokenizer(extra_text_tokens=("extra",)), layers=1, seed=3)
    expected = r"special token <\|TEXT_GENERATION_START\|> has id \d+ in the draft but \d+ in the target"
    with pytest.raises(IncompatiblePairError, match=expected):
        pair(family, shifted)


def test_draft_missing_special_token_rejected(family, tmp_path):
    draft = save_causal_lm(tmp_path / "d", build_tokenizer(drop_special="<|TEXT_UNDERSTANDING_END|>"), layers=1, seed=4)
    expected = r"d is not a Llasa-style speech model: its tokenizer lacks <\|TEXT_UNDERSTANDING_END"
    with pytest.raises(IncompatiblePairError, match=expected):
        pair(family, draft)


def test_different_embedding_size_rejected(family, tmp_path):
    tok = build_tokenizer()
    wider = save_causal_lm(tmp_path / "wider", tok, layers=1, seed=3, vocab_size=len(tok) + 64)
    with pytest.raises(IncompatiblePairError, match="vocabulary sizes differ"):
        pair(family, wider)


def test_missing_special_token_rejected(family, tmp_path):
    tok = build_tokenizer(drop_special="<|SPEECH_GENERATION_END|>")
    target = save_causal_lm(tmp_path / "t", tok, layers=1, seed=3)
    draft = save_causal_lm(tmp_path / "d", tok, layers=1, seed=4)
    with pytest.raises(IncompatiblePairError, match=r"lacks <\|SPEECH_GENERATION_END\|>.*Supported"):
        load_llasa_pair(str(target), str(draft), codec_ref=str(family.codec), options=CPU)


def test_plain_causal_lm_pair_is_not_supported(family, tmp_path):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    plain = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=plain, unk_token="[UNK]")
    target = save_causal_lm(tmp_path / "t", tok, layers=1, seed=3)
    draft = save_causal_lm(tmp_path / "d", tok, layers=1, seed=4)
    with pytest.raises(IncompatiblePairError, match="not a Llasa-style speech model"):
        load_custom_pair(str(target), str(draft), codec_ref=str(family.codec), device="cpu")


def test_not_a_causal_lm_rejected(family, tmp_path):
    folder = tmp_path / "bert"
    shutil.copytree(family.draft, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="bert", architectures=["BertModel"])
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(NotACausalLMError, match="not a causal language model"):
        pair(family, folder)


def test_remote_code_never_enabled_implicitly(family, tmp_path):
    folder = tmp_path / "custom"
    shutil.copytree(family.draft, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="my-speech-lm", auto_map={"AutoModelForCausalLM": "modeling.MyLM"})
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="trust_remote_code=True"):
        pair(family, folder)


def test_from_pretrained_gets_explicit_no_remote_code(family, monkeypatch):
    from transformers import AutoModelForCausalLM

    calls = []
    original = AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    pair(family, family.draft)
    assert len(calls) == 2
    assert all(c["trust_remote_code"] is False and c["use_safetensors"] is True for c in calls)
    assert all(c["dtype"] == torch.float32 for c in calls)


def test_original_xcodec2_format_rejected(family, tmp_path):
    folder = tmp_path / "xcodec2-original"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "xcodec2", "codec_decoder_hidden_size": 1024}))
    with pytest.raises(IncompatiblePairError, match="HKUSTAudio/xcodec2-hf"):
        load_llasa_pair(str(family.target), str(family.draft), codec_ref=str(folder), options=CPU)


def test_missing_weights_reported_with_download_command(family, tmp_path):
    cache = tmp_path / "cache"
    no_weights = tmp_path / "no-weights"
    shutil.copytree(family.draft, no_weights, ignore=shutil.ignore_patterns("*.safetensors"))
    install_in_hub_cache(no_weights, cache, "someone/draft-without-weights")
    expected = "no .safetensors weights.*hf download someone/draft-without-weights"
    with pytest.raises(ModelUnavailableError, match=expected):
        load_llasa_pair(
            str(family.target), "someone/draft-without-weights", codec_ref=str(family.codec),
            options=LoadOptions(device="cpu", cache_dir=cache, check_memory=False),
        )


def test_parameter_counts_from_headers_and_config(family):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(family.target)
    exact = sum(p.numel() for p in model.parameters())
    assert model_memory.safetensors_parameter_count(family.target) == exact
    config = json.loads((family.target / "config.json").read_text())
    assert model_memory.config_parameter_count(config) == exact


def test_memory_check_fails_before_loading_weights(family, monkeypatch):
    monkeypatch.setattr(model_memory, "available_memory", lambda device: 1024)
    monkeypatch.setattr(llasa_loading, "load_causal_lm", _must_not_load)
    with pytest.raises(InsufficientMemoryError, match="not enough memory on cpu"):
        pair(family, family.draft)


def test_memory_estimate_arithmetic():
    estimate = model_memory.MemoryEstimate(
        target_params=3_000_000_000, draft_params=1_000_000_000, codec_params=800_000_000,
        lm_dtype=torch.bfloat16, margin=1.0,
    )
    assert estimate.required_bytes == 4_000_000_000 * 2 + 800_000_000 * 4
    assert "GiB" in estimate.describe()


def test_check_memory_boundary(monkeypatch):
    estimate = model_memory.MemoryEstimate(1000, 100, 10, torch.float32, 1.0)
    monkeypatch.setattr(model_memory, "available_memory", lambda device: estimate.required_bytes)
    model_memory.check_memory(estimate, torch.device("cpu"))  # exactly enough: fine
    monkeypatch.setattr(model_memory, "available_memory", lambda device: estimate.required_bytes - 1)
    with pytest.raises(InsufficientMemoryError):
        model_memory.check_memory(estimate, torch.device("cpu"))


def test_token_is_passed_to_the_hub(monkeypatch, tmp_path):
    seen = {}

    def fake_snapshot_download(repo_id, **kwargs):
        seen.update(kwargs)
        raise __import__("huggingface_hub").errors.LocalEntryNotFoundError("nope")

    monkeypatch.setattr(hub, "snapshot_download", fake_snapshot_download)
    with pytest.raises(ModelUnavailableError):
        hub.resolve("org/gated", revision="abc123", options=LoadOptions(token="hf_secret", cache_dir=tmp_path))
    assert seen["token"] == "hf_secret" and seen["revision"] == "abc123" and seen["local_files_only"] is True


def test_download_progress_is_forwarded_and_monotonic():
    seen = []
    bar_class = hub._progress_bar(lambda f, m: seen.append((f, m)), "org/model")
    quiet = dict(file=io.StringIO())
    files = bar_class(total=4, desc="Fetching 4 files", **quiet)
    received = bar_class(total=0, unit="B", desc="Downloading bytes", **quiet)
    written = bar_class(total=0, unit="B", desc="Reconstructing (incomplete total...)", **quiet)
    received.total = 2_000_000_000
    received.update(2_000_000_000)  # network bytes: total is a guess, not forwarded
    written.total = 2_000_000_000
    written.update(1_000_000_000)
    files.update(1)  # 0.25 < 0.5 already reported: the fraction must not go back
    written.total = 4_000_000_000  # a new file started: the byte fraction drops to 0.25
    written.update(0)
    files.update(3)
    assert [f for f, _ in seen] == [0.5, 0.5, 0.5, 1.0]
    assert seen[0][1] == "org/model: 1.00 GB of 2.00 GB" and seen[-1][1] == "org/model: 4 of 4 files"


def _must_not_load(*args, **kwargs):
    raise AssertionError("weights were loaded although a pre-flight check should have failed")


def test_tiny_llama_builder_is_tiny():
    model = build_llama(600, layers=1)
    assert sum(p.numel() for p in model.parameters()) < 200_000


# -- the pinned codec ----------------------------------------------------------------------------------


def test_default_codec_is_pinned_everywhere():
    assert DEFAULT_CODEC == "HKUSTAudio/xcodec2-hf" and len(DEFAULT_CODEC_REVISION) == 40
    assert hub.revision_for(DEFAULT_CODEC) == DEFAULT_CODEC_REVISION
    assert hub.revision_for(DEFAULT_CODEC, "abc") == "abc"  # an explicit revision wins
    assert hub.revision_for(LLASA_3B) == "main"
    for key in ("llasa-1b-3b", "llasa-1b-8b"):
        preset = presets.get_preset(key)
        assert preset.codec == DEFAULT_CODEC and preset.repos[-1] == DEFAULT_CODEC
        assert preset.revision_for(DEFAULT_CODEC) == DEFAULT_CODEC_REVISION
        assert f"hf download {DEFAULT_CODEC} --revision {DEFAULT_CODEC_REVISION}" in preset.download_hint


def test_readme_ui_and_cli_name_the_same_pinned_codec():
    import argparse

    from ssd_demo.cli import synth as cli_synth

    root = REPOSITORY
    readme = (root / "README.md").read_text()
    guide = (root / "docs" / "hub-models.md").read_text()  # the Hub models' guide, linked from README
    assert f"hf download {DEFAULT_CODEC} --revision {DEFAULT_CODEC_REVISION}" in guide
    assert f"  - {DEFAULT_CODEC}\n" in readme.split("---")[1]  # the Space's model list
    parser = argparse.ArgumentParser()
    cli_synth.add_arguments(parser)
    codec_help = next(a.help for a in parser._actions if a.dest == "codec")
    assert DEFAULT_CODEC in codec_help and DEFAULT_CODEC_REVISION[:7] in codec_help
    ui_source = (root / "ssd_demo" / "app" / "compare" / "tab.py").read_text()
    assert "placeholder=DEFAULT_CODEC" in ui_source
    for path in [root / "README.md", *root.glob("docs/*.md"), *root.glob("ssd_demo/**/*.py")]:
        assert "hf-audio/xcodec2" not in path.read_text(), path  # the conversion with older tensor names

# -- strict loading ------------------------------------------------------------------------------


def _copy_with_renamed_tensors(source: Path, destination: Path, old: str, new: str) -> Path:
    shutil.copytree(source, destination)
    assert rename_tensors(destination, old, new) > 0
    return destination


def test_codec_with_older_tensor_names_is_refused(family, tmp_path):
    # An earlier conversion named these `decoder.*`; loaded as is, the decoder would be random weights.
    codec = _copy_with_renamed_tensors(family.codec, tmp_path / "old-codec", "acoustic_decoder.", "decoder.")
    with pytest.raises(ModelLoadError) as caught:
        load_llasa_pair(str(family.target), str(family.draft), codec_ref=str(codec), options=CPU)
    message = str(caught.value)
    assert message.startswith(f"{codec}: the checkpoint does not match the model")
    assert "weights missing from the checkpoint (acoustic_decoder." in message
    assert "tensors the model does not have (decoder." in message
    assert DEFAULT_CODEC in message and DEFAULT_CODEC_REVISION in message


@pytest.mark.parametrize("role", ["target", "draft"])
def test_language_model_with_renamed_tensors_is_refused(family, tmp_path, role):
    source = family.target if role == "target" else family.draft
    renamed = _copy_with_renamed_tensors(source, tmp_path / role, ".self_attn.", ".attention.")
    target, draft = (renamed, family.draft) if role == "target" else (family.target, renamed)
    with pytest.raises(ModelLoadError, match=rf"^{renamed}: the checkpoint does not match.*self_attn.*attention"):
        load_llasa_pair(str(target), str(draft), codec_ref=str(family.codec), options=CPU)


def test_wrong_shapes_and_truncated_files_are_refused(family, tmp_path):
    from safetensors.torch import load_file, save_file

    reshaped = tmp_path / "reshaped"
    shutil.copytree(family.draft, reshaped)
    tensors = load_file(reshaped / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"][:-1].clone()
    save_file(tensors, reshaped / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"1 tensors of the wrong shape \(model.norm.weight \(63,\) vs \(64,\)\)"):
        pair(family, reshaped)
    truncated = tmp_path / "truncated"
    shutil.copytree(family.draft, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=f"^{truncated}: the model cannot be loaded"):
        pair(family, truncated)


def test_loading_report_check():
    clean = {"missing_keys": set(), "unexpected_keys": set(), "mismatched_keys": set(), "error_msgs": []}
    weights.check_loading_info(clean, "org/model")
    no_head = {**clean, "missing_keys": {"lm_head.weight"}}
    weights.check_loading_info(no_head, "org/model", tied_embeddings=True)  # the head is the embedding matrix
    with pytest.raises(ModelLoadError, match=r"org/model: .*1 weights missing from the checkpoint \(lm_head.weight\)"):
        weights.check_loading_info(no_head, "org/model", tied_embeddings=False)
    many = {**clean, "unexpected_keys": {f"extra.{i}" for i in range(5)}}
    with pytest.raises(ModelLoadError, match=r"5 checkpoint tensors .*\(extra.0, extra.1, extra.2, \.\.\.\)"):
        weights.check_loading_info(many, "org/model")


def test_tied_output_layer_loads_without_a_stored_head(family, tmp_path):
    tok = build_tokenizer()
    tied = tmp_path / "tied"
    model = build_llama(len(tok), layers=1, seed=5)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    model.save_pretrained(tied)
    tok.save_pretrained(tied)
    from safetensors.torch import load_file

    assert "lm_head.weight" not in load_file(tied / "model.safetensors")
    synth = pair(family, tied)
    draft = next(iter(synth.drafts.values()))
    assert draft.lm_head.weight.data_ptr() == draft.model.embed_tokens.weight.data_ptr()


def test_weights_are_placed_by_accelerate_and_checked(family, monkeypatch):
    from transformers import AutoModelForCausalLM, Xcodec2Model

    calls = []
    for cls in (AutoModelForCausalLM, Xcodec2Model):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            calls.append(kwargs)
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    pair(family, family.draft)
    assert len(calls) == 3
    assert all(c["device_map"] == "cpu" and c["output_loading_info"] is True for c in calls)


def test_accelerate_is_a_pinned_requirement():
    requirements = (REPOSITORY / "requirements.txt").read_text().splitlines()
    import accelerate

    assert f"accelerate=={accelerate.__version__}" in requirements


# -- ZeroGPU -----------------------------------------------------------------------------------------


def test_zerogpu_never_touches_cuda_before_the_gpu_call(monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert hub.on_zerogpu()

    def no_cuda(*args, **kwargs):
        raise AssertionError("CUDA was queried outside the GPU call")

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", no_cuda)
    monkeypatch.setattr(torch.cuda, "mem_get_info", no_cuda)
    cuda = torch.device("cuda")
    assert hub.auto_dtype(cuda) == torch.bfloat16
    assert weights.placement(cuda) == "cpu"  # weights wait in host RAM; ZeroGPU moves them for each call
    assert not model_memory.memory_checked_before_loading(LoadOptions(), cuda)
    assert model_memory.memory_checked_before_loading(LoadOptions(), torch.device("cpu"))
    monkeypatch.setenv("SPACES_ZERO_GPU", "")
    assert not hub.on_zerogpu() and weights.placement(cuda) == "cuda"
    assert model_memory.memory_checked_before_loading(LoadOptions(), cuda)
    assert not model_memory.memory_checked_before_loading(LoadOptions(check_memory=False), cuda)


def test_gpu_memory_is_checked_inside_the_gpu_call(family, monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "1")
    monkeypatch.setattr(llasa_loading, "memory_checked_before_loading", lambda options, device: False)  # as on a Space
    monkeypatch.setattr(model_memory, "available_memory", _must_not_load)
    synth = pair(family, family.draft)
    model_memory.check_gpu_memory(synth)  # on the CPU: nothing to measure
    monkeypatch.setattr(type(synth), "device", property(lambda self: torch.device("cuda")))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1024, 2**40))
    with pytest.raises(InsufficientMemoryError, match="not enough memory on cuda"):
        model_memory.check_gpu_memory(synth)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**40, 2**40))
    model_memory.check_gpu_memory(synth)


# -- parameter counts ------------------------------------------------------------------------------

def test_a_stored_copy_of_a_tied_output_layer_is_counted_once(family, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "tied-with-head"
    shutil.copytree(family.draft, folder)
    tensors = load_file(folder / "model.safetensors")
    tensors.pop("lm_head.weight")
    exact = sum(t.numel() for t in tensors.values())
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()  # tied, but stored anyway
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    config = {**json.loads((folder / "config.json").read_text()), "tie_word_embeddings": True}
    assert model_memory.safetensors_parameter_count(folder) > exact
    assert model_memory.parameter_count(folder, config, str(folder), None, CPU) == exact
