"""Llasa backend on tiny local stand-ins: prompt format, speech-token mask, codec round trip,
voice cloning, and the full text -> tokens -> waveform path (AR and speculative)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from support.llasa_fixtures import NUM_SPEECH_TOKENS, build_llasa_family, sine_clip  # noqa: E402
from support.tiny_models import with_logit_bias  # noqa: E402

from ssd_demo.backends.llasa import LlasaBackend, _join_transcript, to_mono_float  # noqa: E402
from ssd_demo.speech.synthesis import Backend, TextError, VoicePrompt  # noqa: E402

TEXT = "Hello there, how are you?"
# The model card's prompt, rendered by Llama 3.2's chat template (date pinned).
EXPECTED_PROMPT = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\n"
    "Convert the text to speech:<|TEXT_UNDERSTANDING_START|>{text}<|TEXT_UNDERSTANDING_END|><|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
    "<|SPEECH_GENERATION_START|>{speech}"
)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return build_llasa_family(tmp_path_factory.mktemp("llasa"))


@pytest.fixture(scope="module")
def synth(family):
    from ssd_demo.backends.llasa_loading import load_llasa_pair
    from ssd_demo.models.hub import LoadOptions

    return load_llasa_pair(
        str(family.target), str(family.draft), codec_ref=str(family.codec), options=LoadOptions(device="cpu")
    )


@pytest.fixture(scope="module")
def backend(synth) -> LlasaBackend:
    return synth.backend


def test_backend_satisfies_protocol_and_reads_ids_from_tokenizer(backend):
    assert isinstance(backend, Backend)
    vocab = backend.tokenizer.get_vocab()
    assert backend.vocab.first_id == vocab["<|s_0|>"]
    assert backend.eos_token_id == vocab["<|SPEECH_GENERATION_END|>"]
    allowed = backend.allowed_token_ids()
    assert len(allowed) == NUM_SPEECH_TOKENS + 1
    assert allowed[-1] == backend.eos_token_id
    assert allowed[:NUM_SPEECH_TOKENS] == [vocab[f"<|s_{i}|>"] for i in range(NUM_SPEECH_TOKENS)]
    assert backend.sample_rate == 16_000


def test_default_sampling_is_the_model_cards(backend):
    config = backend.default_config()
    assert config.temperature == 0.8 and config.top_p == 1.0 and config.top_k == 0
    assert config.eos_ids == (backend.eos_token_id,)
    assert set(config.allowed_token_ids) == set(backend.allowed_token_ids())


def test_prompt_matches_documented_template_exactly(backend):
    assert backend.prompt_text(TEXT) == EXPECTED_PROMPT.format(text=TEXT, speech="")
    ids = backend.prompt_ids(TEXT)
    tokens = backend.tokenizer.convert_ids_to_tokens(ids)
    assert tokens[0] == "<|begin_of_text|>" and tokens.count("<|begin_of_text|>") == 1
    assert tokens[-1] == "<|SPEECH_GENERATION_START|>"
    assert "<|TEXT_UNDERSTANDING_START|>" in tokens and "<|TEXT_UNDERSTANDING_END|>" in tokens
    # Same ids as the model card's own call (apply_chat_template with tokenize=True).
    chat = [
        {
            "role": "user",
            "content": f"Convert the text to speech:<|TEXT_UNDERSTANDING_START|>{TEXT}<|TEXT_UNDERSTANDING_END|>",
        },
        {"role": "assistant", "content": "<|SPEECH_GENERATION_START|>"},
    ]
    card = backend.tokenizer.apply_chat_template(
        chat, tokenize=True, continue_final_message=True, return_dict=False, date_string="26 Jul 2024"
    )
    assert ids == list(card)


def test_unpinned_date_follows_the_template(backend):
    from datetime import datetime

    unpinned = LlasaBackend(backend.tokenizer, backend.codec, backend.feature_extractor, date_string=None)
    before = datetime.now().strftime("%d %b %Y")
    rendered = unpinned.prompt_text(TEXT)
    after = datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {before}" in rendered or f"Today Date: {after}" in rendered
    assert rendered.endswith("<|SPEECH_GENERATION_START|>")


def test_voice_prompt_goes_after_speech_start_and_transcript_before_text(backend):
    codes = [3, 0, NUM_SPEECH_TOKENS - 1]
    vp = VoicePrompt(audio=np.zeros(16_000, np.float32), sample_rate=16_000, transcript="A reference clip.")
    rendered = backend.prompt_text(TEXT, vp, prompt_codes=codes)
    speech = "<|s_3|><|s_0|><|s_255|>"
    assert rendered == EXPECTED_PROMPT.format(text=f"A reference clip. {TEXT}", speech=speech)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "x" * 3001, "say <|s_12|> now", "end <|eot_id|>"],
    ids=["empty", "blank", "too-long", "speech-markup", "control-markup"],
)
def test_bad_text_raises_text_error(backend, text):
    with pytest.raises(TextError):
        backend.prompt_ids(text)


def test_tokens_to_codes_and_audio(backend):
    first, end = backend.vocab.first_id, backend.eos_token_id
    assert backend.tokens_to_codes([first + 5, first, first + 255, end]) == [5, 0, 255]
    assert backend.tokens_to_codes([first + 1, end, first + 2]) == [1]  # nothing after the end token
    with pytest.raises(ValueError, match="not a speech token"):
        backend.tokens_to_codes([first - 1])
    audio = backend.tokens_to_audio([first + i for i in range(10)] + [end])
    assert audio.dtype == np.float32 and audio.shape == (10 * backend.hop_length,)
    assert np.all(np.abs(audio) <= 1.0) and np.isfinite(audio).all()
    assert backend.tokens_to_audio([end]).shape == (0,)


def test_codes_reach_the_codec_unchanged(backend, monkeypatch):
    seen = {}
    original = backend.codec.decode

    def spy(audio_codes=None, **kwargs):
        seen["codes"] = audio_codes
        return original(audio_codes=audio_codes, **kwargs)

    monkeypatch.setattr(backend.codec, "decode", spy)
    backend.tokens_to_audio([backend.vocab.first_id + c for c in (7, 8, 9)])
    assert seen["codes"].shape == (1, 1, 3) and seen["codes"].flatten().tolist() == [7, 8, 9]


def test_encode_prompt_resamples_and_limits_length(backend):
    clip = sine_clip(1.0, sample_rate=24_000)
    codes = backend.encode_prompt(VoicePrompt(audio=clip, sample_rate=24_000, transcript="hi"))
    assert len(codes) == 51  # 1 s at 50 codes/s after resampling to 16 kHz, plus the padded last frame
    assert all(0 <= c < NUM_SPEECH_TOKENS for c in codes)
    stereo_int16 = (np.stack([clip, clip], axis=1) * 32767).astype(np.int16)
    assert backend.encode_prompt(VoicePrompt(stereo_int16, 24_000, "hi")) == codes
    with pytest.raises(ValueError, match="limit is 10 s"):
        backend.encode_prompt(VoicePrompt(sine_clip(10.5, 8_000), 8_000, "hi"))
    with pytest.raises(ValueError, match="at least"):
        backend.encode_prompt(VoicePrompt(sine_clip(0.1, 16_000), 16_000, "hi"))


@pytest.mark.parametrize("samples, codes", [(16_000, 51), (16_100, 51), (16_319, 51), (16_320, 52), (8_000, 26)])
def test_voice_prompt_gets_as_many_codes_as_the_original_encoder(backend, samples, codes):
    # The original XCodec2 encoder pads a clip by hop - len % hop samples: len // 320 + 1 codes at 16 kHz.
    clip = sine_clip(1.1, sample_rate=16_000)[:samples]
    assert len(clip) == samples
    assert len(backend.encode_prompt(VoicePrompt(clip, 16_000, "hi"))) == codes == samples // 320 + 1


def test_cloned_speech_is_decoded_after_the_prompt_codes(backend, monkeypatch):
    seen = []
    original = backend.codec.decode

    def spy(audio_codes=None, **kwargs):
        seen.append(audio_codes.flatten().tolist())
        return original(audio_codes=audio_codes, **kwargs)

    monkeypatch.setattr(backend.codec, "decode", spy)
    vp = VoicePrompt(sine_clip(1.0, 16_000), 16_000, "A reference clip.")
    prompt_codes = backend.encode_prompt(vp)
    prompt = backend.prompt_ids(TEXT, vp)
    assert backend.prompt_codes(prompt) == prompt_codes
    assert backend.prompt_codes(backend.prompt_ids(TEXT)) == []  # no voice prompt, no context
    generated = [5, 9, 200, 3]
    tokens = [backend.vocab.first_id + c for c in generated] + [backend.eos_token_id]
    audio = backend.tokens_to_audio(tokens, prompt_ids=prompt)
    assert seen[-1] == prompt_codes + generated  # the codec's input starts with the prompt's codes
    assert audio.shape == (len(generated) * backend.hop_length,)  # and the prompt's samples are cut off
    # What is kept is the tail of the whole decode, and it differs from decoding the same codes cold:
    # the codec's decoder is not causal, so the prompt shapes the first frames.
    with torch.no_grad():
        whole = original(audio_codes=torch.tensor(prompt_codes + generated).view(1, 1, -1)).audio_values[0, 0]
    tail = np.clip(whole[len(prompt_codes) * backend.hop_length:].numpy(), -1, 1)
    assert np.allclose(audio, tail, atol=1e-6)
    assert not np.allclose(audio, backend.codes_to_audio(generated), atol=1e-4)
    assert backend.tokens_to_audio([backend.eos_token_id], prompt_ids=prompt).shape == (0,)


def test_synthesizer_decodes_cloned_speech_with_its_prompt(synth, monkeypatch):
    calls = []
    original = synth.backend.tokens_to_audio

    def spy(tokens, prompt_ids=None):
        calls.append(prompt_ids)
        return original(tokens, prompt_ids=prompt_ids)

    monkeypatch.setattr(synth.backend, "tokens_to_audio", spy)
    vp = VoicePrompt(sine_clip(1.0, 16_000), 16_000, "A reference clip.")
    config = synth.config(max_new_tokens=6, seed=3)
    result = synth.synthesize(TEXT, mode="ar", config=config, voice_prompt=vp)
    assert calls[-1] == synth.backend.prompt_ids(TEXT, vp)
    assert len(result.audio) == len(synth.backend.tokens_to_codes(result.generation.tokens)) * synth.backend.hop_length
    synth.synthesize(TEXT, mode="ar", config=config)
    assert calls[-1] is None  # no voice prompt: nothing to decode before the speech


def test_to_mono_float_and_join():
    assert to_mono_float(np.array([0, 32767], dtype=np.int16)).tolist() == [0.0, 1.0]
    assert to_mono_float(np.ones((2, 100))).shape == (100,)
    assert _join_transcript("Hello.", "World") == "Hello. World"
    assert _join_transcript("你好。", "世界") == "你好。世界"  # the card joins CJK text directly


@pytest.mark.parametrize("mode", ["ar", "speculative"])
@pytest.mark.parametrize("cloned", [False, True], ids=["plain", "voice-prompt"])
def test_full_path_text_to_waveform(synth, mode, cloned):
    vp = VoicePrompt(sine_clip(1.0, 22_050), 22_050, "A reference clip.") if cloned else None
    config = synth.config(max_new_tokens=24, seed=7, draft_len=3)
    result = synth.synthesize(TEXT, mode=mode, config=config, voice_prompt=vp)
    tokens = result.generation.tokens
    backend = synth.backend
    assert all(t in set(backend.allowed_token_ids()) for t in tokens)
    codes = backend.tokens_to_codes(tokens)
    assert result.audio.shape == (len(codes) * backend.hop_length,)
    assert result.sample_rate == 16_000 and np.isfinite(result.audio).all()
    if mode == "speculative":
        assert result.generation.stats.rounds >= 1


def test_greedy_speculative_equals_ar(synth):
    config = synth.config(max_new_tokens=20, temperature=0.0, draft_len=4)
    ar = synth.synthesize(TEXT, mode="ar", config=config)
    spec = synth.synthesize(TEXT, mode="speculative", config=config)
    assert spec.generation.tokens == ar.generation.tokens


def test_backend_rejects_codec_tokenizer_mismatch(backend):
    from support.llasa_fixtures import build_codec

    small_codec, extractor = build_codec(levels=(4, 4, 4, 4, 4))  # 1024 codes, tokenizer has 256
    with pytest.raises(ValueError, match="speech tokens do not match the codec"):
        LlasaBackend(backend.tokenizer, small_codec, extractor)


def test_bfloat16_language_models_with_float32_codec(family):
    # The CUDA configuration (bf16 LMs, fp32 codec), exercised on the CPU.
    from ssd_demo.backends.llasa_loading import load_llasa_pair
    from ssd_demo.models.hub import LoadOptions

    synth = load_llasa_pair(
        str(family.target), str(family.draft), codec_ref=str(family.codec),
        options=LoadOptions(device="cpu", dtype=torch.bfloat16),
    )
    assert next(synth.target.parameters()).dtype == torch.bfloat16
    assert next(synth.backend.codec.parameters()).dtype == torch.float32
    vp = VoicePrompt(sine_clip(1.0, 16_000), 16_000, "A reference clip.")
    result = synth.synthesize(TEXT, mode="speculative", config=synth.config(max_new_tokens=16, seed=2), voice_prompt=vp)
    assert result.audio.dtype == np.float32 and np.isfinite(result.audio).all()
    assert len(result.audio) == len(synth.backend.tokens_to_codes(result.generation.tokens)) * synth.backend.hop_length


def test_generation_is_cut_to_the_models_context(synth):
    prompt = synth.backend.prompt_ids("hello there")
    saved = synth.backend.max_context
    synth.backend.max_context = len(prompt) + 60
    try:
        result = synth.synthesize("hello there", mode="speculative", config=synth.config(max_new_tokens=500, seed=0))
        assert result.config.max_new_tokens == 60 and len(result.generation.tokens) <= 60
    finally:
        synth.backend.max_context = saved


def test_default_length_is_the_context_minus_the_prompt(synth, monkeypatch):
    # As the model cards' max_length=2048: speech may fill what the prompt leaves of the context.
    assert synth.config().max_new_tokens == synth.backend.max_context == 2048
    vp = VoicePrompt(sine_clip(2.0, 16_000), 16_000, "A reference clip.")
    prompt = synth.backend.prompt_ids(TEXT, vp)
    monkeypatch.setattr(synth.backend, "max_context", len(prompt) + 60)  # a short context
    for model in (synth.target, *synth.drafts.values()):  # models that never end: runs reach the limit
        monkeypatch.setattr(model, "lm_head", model.lm_head)  # put back after the test
        with_logit_bias(model, {synth.backend.eos_token_id: -1e4})
    for mode in ("ar", "speculative"):
        result = synth.synthesize(TEXT, mode=mode, config=synth.config(seed=4), voice_prompt=vp)
        assert result.config.max_new_tokens == 60 == len(result.generation.tokens)
        assert result.generation.stats.finish_reason == "length"



def test_long_text_is_spoken_in_sentence_chunks_and_short_text_in_one(backend):
    assert [c.text for c in backend.split_text(TEXT)] == [TEXT]
    long_text = " ".join(f"Sentence number {i} is here, and it goes on for a little while." for i in range(12))
    chunks = backend.split_text(long_text)
    assert len(chunks) >= 3 and all(len(c.text) <= backend.chunk_chars for c in chunks)
    assert " ".join(c.text for c in chunks) == long_text  # nothing dropped (decoding by chunk: test_chunked_synthesis)
