"""Loading Llasa pairs: a Llasa target, a smaller Llasa draft and the XCodec2 codec that voices them.

Holds what is specific to Llasa and XCodec2: the pinned default codec, the checks that a tokenizer
is Llasa-shaped and that target and draft share its vocabulary, the codec's config check and
loading, and `load_llasa_pair` / `load_custom_pair`, which put `ssd_demo.models.hub`'s generic steps
(resolve, pre-flight checks, strict loading) and `ssd_demo.models.memory`'s check together for a pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoFeatureExtractor, Xcodec2Model

from ..errors import ModelLoadError
from ..errors import IncompatiblePairError, ModelUnavailableError
from ..models.checks import check_causal_lm, load_tokenizer, some_names, vocab_size_of
from ..models.hub import (LoadOptions, ProgressCallback, auto_device, auto_dtype, download_command, fetch_weights,
                          has_cached_weights, pin_revision, resolve_all, short_name)
from ..models.weights import load_causal_lm, strict_from_pretrained
from ..models.memory import (MEMORY_ESTIMATES, MemoryEstimate, check_memory, memory_checked_before_loading,
                             parameter_count)
from ..models.policy import MAX_DOWNLOAD_ENV
from ..speech.synthesis import Synthesizer
from .llasa_codec import DEFAULT_CODEC, DEFAULT_CODEC_REVISION
from .llasa import CONTROL_TOKENS, LlasaBackend, missing_llasa_tokens, speech_token

pin_revision(DEFAULT_CODEC, DEFAULT_CODEC_REVISION)  # loaded at that commit unless a revision is asked for


def check_llasa_shaped(tokenizer, ref: str) -> None:
    missing = missing_llasa_tokens(tokenizer)
    if missing:
        raise IncompatiblePairError(
            f"{ref} is not a Llasa-style speech model: its tokenizer lacks {', '.join(missing[:4])}"
            + (" ..." if len(missing) > 4 else "")
            + ". Supported model pairs: Llama-family causal LMs with Llasa's tokenizer (control tokens such as "
            "<|SPEECH_GENERATION_START|>/<|SPEECH_GENERATION_END|> and speech tokens <|s_0|>.. decoded by XCodec2), "
            "e.g. HKUSTAudio/Llasa-1B with HKUSTAudio/Llasa-3B or -8B, or fine-tunes of them."
        )


def check_same_vocabulary(
    target_tok, draft_tok, target_cfg: dict, draft_cfg: dict, target_ref: str, draft_ref: str
) -> None:
    """Speculative decoding compares the two models token by token: ids must mean the same thing.

    Llasa's control tokens, the speech tokens and BOS are checked by name first (the clearest
    message), then the whole vocabulary, then the size of the output layers. Special-token
    *roles* such as pad or eos may differ harmlessly: generation stops at the speech end token.
    """
    target_vocab, draft_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    names = [*CONTROL_TOKENS, speech_token(0), target_tok.bos_token, draft_tok.bos_token]
    for name in dict.fromkeys(n for n in names if n):
        if target_vocab.get(name) != draft_vocab.get(name):
            raise IncompatiblePairError(
                f"{draft_ref} cannot draft for {target_ref}: special token {name} has id "
                f"{draft_vocab.get(name)} in the draft but {target_vocab.get(name)} in the target"
            )
    if target_vocab != draft_vocab:
        only_target = sorted(set(target_vocab) - set(draft_vocab))
        only_draft = sorted(set(draft_vocab) - set(target_vocab))
        moved = sorted(t for t in set(target_vocab) & set(draft_vocab) if target_vocab[t] != draft_vocab[t])
        details = [some_names(tokens, what) for tokens, what in (
            (only_target, "tokens only in the target"), (only_draft, "tokens only in the draft"),
            (moved, "tokens with different ids"),
        ) if tokens]
        raise IncompatiblePairError(
            f"{draft_ref} cannot draft for {target_ref}: their vocabularies differ ({'; '.join(details)})"
        )
    t_size, d_size = vocab_size_of(target_cfg), vocab_size_of(draft_cfg)
    if t_size != d_size:
        raise IncompatiblePairError(
            f"{draft_ref} cannot draft for {target_ref}: output vocabulary sizes differ ({d_size} vs {t_size})"
        )


def check_codec_config(config: dict, ref: str) -> None:
    if config.get("model_type") != "xcodec2":
        raise IncompatiblePairError(f"{ref} is not an XCodec2 codec (model type {config.get('model_type')!r})")
    if "quantization_levels" not in config and "codec_decoder_hidden_size" in config:
        # HKUSTAudio/xcodec2 is the original remote-code checkpoint; transformers reads the converted one.
        raise IncompatiblePairError(
            f"{ref} is XCodec2 in its original remote-code format; use the transformers-format "
            f"checkpoint {DEFAULT_CODEC} instead"
        )


def _load_codec(folder: Path, ref: str, device: torch.device):
    # float32: the inverse STFT head is the part most sensitive to reduced precision, and it is small.
    hint = f"; the XCodec2 checkpoint for this transformers version is {download_command(DEFAULT_CODEC)}"
    codec = strict_from_pretrained(Xcodec2Model, folder, ref, device, hint=hint, dtype=torch.float32)
    try:
        extractor = AutoFeatureExtractor.from_pretrained(folder)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{ref}: no usable preprocessor_config.json for XCodec2 ({error})") from None
    return codec, extractor


@dataclass
class LlasaPlan:
    """A pair that passed every pre-flight check (only metadata and tokenizers read so far)."""

    target: object  # hub's resolved metadata of each repo
    draft: object
    codec: object
    target_tokenizer: object
    estimate: MemoryEstimate
    device: torch.device
    dtype: torch.dtype
    memory_checked: bool


def plan_llasa_pair(
    target_ref: str,
    draft_ref: str,
    *,
    target_revision: str | None = None,
    draft_revision: str | None = None,
    codec_ref: str = DEFAULT_CODEC,
    codec_revision: str | None = None,
    options: LoadOptions = LoadOptions(),
    download_limit: float | None = None,
) -> LlasaPlan:
    """Every check that needs no weights: configs, tokenizers, one vocabulary, the download size (when
    `download_limit` bytes is given) and, where it can be measured now, the memory."""
    device = auto_device(options.device)
    dtype = auto_dtype(device, options.dtype)
    target, draft, codec = resolve_all(
        [(target_ref, target_revision), (draft_ref, draft_revision), (codec_ref, codec_revision)], options
    )
    for item in (target, draft):
        check_causal_lm(item.config, item.ref, options.trust_remote_code)
    check_codec_config(codec.config, codec.ref)
    target_tok = load_tokenizer(target.folder, target.ref, options.trust_remote_code)
    draft_tok = load_tokenizer(draft.folder, draft.ref, options.trust_remote_code)
    check_llasa_shaped(target_tok, target.ref)
    check_llasa_shaped(draft_tok, draft.ref)
    check_same_vocabulary(target_tok, draft_tok, target.config, draft.config, target.ref, draft.ref)
    counts = [parameter_count(i.folder, i.config, i.ref, i.revision, options) for i in (target, draft, codec)]
    estimate = MemoryEstimate(target_params=counts[0], draft_params=counts[1], codec_params=counts[2],
                              lm_dtype=dtype, margin=options.memory_margin)
    if download_limit is not None:
        # Weights are stored in 16 bits (the codec in 32); what the cache holds already is free.
        sizes = {target.ref: 2 * counts[0], draft.ref: 2 * counts[1], codec.ref: 4 * counts[2]}
        missing = sum(size for ref, size in sizes.items() if not has_cached_weights(ref))
        if missing > download_limit:
            raise ModelUnavailableError(
                f"this pair would download about {missing / 1e9:.1f} GB; this server allows "
                f"{download_limit / 1e9:.0f} GB per pair (the operator sets {MAX_DOWNLOAD_ENV})")
    memory_checked = memory_checked_before_loading(options, device)
    if memory_checked:
        check_memory(estimate, device)
    return LlasaPlan(target, draft, codec, target_tok, estimate, device, dtype, memory_checked)


def load_llasa_pair(
    target_ref: str,
    draft_ref: str,
    *,
    target_revision: str | None = None,
    draft_revision: str | None = None,
    codec_ref: str = DEFAULT_CODEC,
    codec_revision: str | None = None,
    draft_name: str | None = None,
    options: LoadOptions = LoadOptions(),
    progress: ProgressCallback | None = None,
    backend_options: dict | None = None,
) -> Synthesizer:
    """A `Synthesizer` for a Llasa target drafted by a smaller Llasa (Hub repo ids or local folders)."""
    report = progress or (lambda fraction, message: None)
    report(0.0, "checking model files")
    plan = plan_llasa_pair(target_ref, draft_ref, target_revision=target_revision, draft_revision=draft_revision,
                           codec_ref=codec_ref, codec_revision=codec_revision, options=options)
    target, draft, codec, device, dtype = plan.target, plan.draft, plan.codec, plan.device, plan.dtype
    report(0.1, f"pre-flight checks passed; {plan.estimate.describe()}")

    stages = [(target, 0.1, 0.55), (draft, 0.55, 0.75), (codec, 0.75, 0.85)]
    folders = []
    for item, start, end in stages:
        sub = (lambda s, e: (lambda f, m: report(s + (e - s) * f, f"downloading {m}")))(start, end)
        folders.append(fetch_weights(item, options, sub))
    report(0.85, f"loading {target.ref} ({str(dtype).removeprefix('torch.')} on {device})")
    target_model = load_causal_lm(folders[0], target.ref, device, dtype, options)
    report(0.93, f"loading {draft.ref}")
    draft_model = load_causal_lm(folders[1], draft.ref, device, dtype, options)
    report(0.97, f"loading codec {codec.ref}")
    codec_model, extractor = _load_codec(folders[2], codec.ref, device)
    try:
        backend = LlasaBackend(
            tokenizer=plan.target_tokenizer, codec=codec_model, feature_extractor=extractor, **(backend_options or {})
        )
    except ValueError as error:
        raise IncompatiblePairError(f"{target.ref} with codec {codec.ref}: {error}") from None
    name = draft_name or short_name(draft.ref)
    synthesizer = Synthesizer(backend, target_model, {name: draft_model}, default_draft=name)
    MEMORY_ESTIMATES[synthesizer] = (plan.estimate, plan.memory_checked or not options.check_memory)
    report(1.0, "ready")
    return synthesizer


def load_custom_pair(
    target_ref: str,
    draft_ref: str,
    *,
    target_revision: str | None = None,
    draft_revision: str | None = None,
    codec_ref: str = DEFAULT_CODEC,
    device: str | None = None,
    token: str | None = None,
    offline: bool | None = None,
    progress: ProgressCallback | None = None,
    **options,
) -> Synthesizer:
    """Load a user-chosen target/draft pair: two Hub repo ids or two local folders.

    Only Llasa-style pairs are supported (see `check_llasa_shaped`); other causal LMs are
    rejected with an error that says so, because the demo has no way to turn their tokens
    into audio.
    """
    if not target_ref or not draft_ref:
        raise ModelLoadError("a custom pair needs both a target and a draft (Hub repo ids or local folders)")
    load_options = LoadOptions(device=device, token=token, offline=offline, **options)
    return load_llasa_pair(
        target_ref.strip(),
        draft_ref.strip(),
        target_revision=target_revision,
        draft_revision=draft_revision,
        codec_ref=codec_ref,
        options=load_options,
        progress=progress,
    )
