"""CosyVoice 2 end to end on a tiny checkpoint folder laid out like the Hub repository (official file
names and tensor layouts, tiny random weights): loading, prompts and the official length and sampling
rules, both decoders through the Synthesizer, audio out, and the errors a user can meet."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from ssd_demo.backends.cosyvoice2.backend import MAX_TOKEN_TEXT_RATIO, MIN_TOKEN_TEXT_RATIO
from ssd_demo.backends.cosyvoice2.frontend import VoiceFeatures, text_tokens
from ssd_demo.backends.cosyvoice2.loading import load_cosyvoice2
from ssd_demo.errors import InvalidSettingError, ModelLoadError, TextError
from ssd_demo.speech.synthesis import VoicePrompt
from support.cosyvoice2 import (FLOW, HIFT, MELS, SPEAKER, SPEECH, FakeEncoders, build_tiny_checkpoint,  # noqa: F401
                                default_voice, folder)  # (folder: a fixture)


@pytest.fixture(scope="module")
def synth(folder):
    return load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT)


def test_the_paper_draft_is_built_from_the_target(synth):
    draft = synth.drafts["layers"]
    assert draft.config.num_hidden_layers == 8 and synth.target.config.num_hidden_layers == 10
    assert draft.model.layers[2].mlp.up_proj.weight.data_ptr() == synth.target.model.layers[4].mlp.up_proj.weight.data_ptr()


def test_prompt_is_start_transcript_text_task_and_voice_tokens(synth):
    backend = synth.backend
    voice = backend.default_voice
    prompt = backend.prompt_ids("a cat sat")
    layout = backend.layout
    text = [t - layout.text_offset for t in prompt[1: prompt.index(layout.task_id)]]
    assert prompt[0] == layout.sos_id and text[:3] == list(voice.transcript_tokens)
    assert text[3:] == list(backend.tokenizer(["a cat sat"])["input_ids"][0])
    assert tuple(prompt[prompt.index(layout.task_id) + 1:]) == voice.speech_tokens


@pytest.mark.parametrize("text, spoken", [
    ("It was 3.14 and 1,000,000 and 2nd", "It was three point one four and one million and second."),
    ("It costs $5.99 today.", "It costs five dollars ninety-nine today."),
    ("We met on 3/14/2025.", "We met on March fourteenth, two thousand and twenty-five."),
    ("Born 2024-03-14 in 1999", "Born March fourteenth, two thousand and twenty-four in nineteen ninety-nine."),
    ("Come at 10:30 or at 7pm.", "Come at ten thirty or at seven PM."),
    ("The 21st, 1st and 103rd runs", "The twenty-first, first and one hundred and third runs."),
    ("Up 50% to -5 degrees, 3-4 times", "Up fifty percent to minus five degrees, three to four times."),
    ("In the 1990s, 2 cats.", "In the nineteen nineties, two cats."),
])
def test_numbers_are_normalised_then_spelt_out_as_words(synth, text, spoken):
    """The official front end's order (normaliser, then `inflect` for the digits left), with our normaliser in
    `wetext`'s place: no digit, and no "three.fourteen", "one,zero,zero" or "twond", reaches the tokenizer."""
    chunks = synth.backend.split_text(text)
    assert [c.text for c in chunks] == [spoken]
    backend = synth.backend  # prompt_ids normalises too (it adds no full stop: that is the paragraph split's)
    assert backend.prompt_ids(text) == backend.prompt_ids(spoken if text.endswith(".") else spoken[:-1])


def test_a_long_digit_run_is_read_digit_by_digit_not_refused(synth):
    digits = "1234567890" * 4  # 40 digits: inflect alone raises NumOutOfRangeError from 37 on
    words = "one two three four five six seven eight nine zero"
    for text in (f"Code {digits}.", f"${digits}", f"Ref{digits}th"):
        chunks = [c.text.strip() for c in synth.backend.split_text(text)]  # the tiny tokenizer's budget cuts it
        assert not any(ch.isdigit() for chunk in chunks for ch in chunk)
        assert " ".join([words] * 4) in " ".join(chunks)
        synth.backend.prompt_ids(text)


def test_the_official_steps_around_the_normaliser():
    from ssd_demo.backends.cosyvoice2.text_norm import normalize_english, normalize_numbers, spell_out_number

    # spell_out_number is the official inflect step, for the digits the normaliser leaves
    assert spell_out_number("1955, 2 cats") == "one thousand, nine hundred and fifty-five, two cats"
    assert spell_out_number("v2 and 4x4") == "v two and four x four"  # not "vtwo", "fourxfour"
    assert spell_out_number("9" * 40) == " ".join(["nine"] * 40)
    # like wetext, the normaliser leaves text without a digit as it is (so "Dr." is as an official install sees it)
    assert normalize_numbers("Dr. Smith's *cats*  here") == "Dr. Smith's *cats*  here"
    assert normalize_english("  On April 13, 1955, 2 cats ") == "On April thirteenth, nineteen fifty-five, two cats"


@pytest.mark.parametrize("text, spoken", [
    # no digit lost: grouped thousands, leading zeros, phone and card numbers
    ("1 000 000 people and 12 345 items", "one million people and twelve thousand, three hundred and forty-five items"),
    ("1_000_000 rows, 1.000.000 Einwohner", "one million rows, one million Einwohner"),
    ("Agent 007 in ZIP 02134", "Agent zero zero seven in ZIP zero two one three four"),
    ("Dial 020 7946 0958", "Dial zero two zero, seven nine four six, zero nine five eight"),
    ("Call +1 415 555 0100", "Call plus one, four one five, five five five, zero one zero zero"),
    ("Card 4111 1111 1111 1111", "Card four one one one, one one one one, one one one one, one one one one"),
    # symbols spoken, not left in the text
    ("Heat to 350°F, or -5°C, or −12 °C", "Heat to three hundred and fifty degrees Fahrenheit, or minus five degrees "
                                         "Celsius, or minus twelve degrees Celsius"),
    ("Add 1½ cups, ½ a spoon, x² and 10³", "Add one and a half cups, a half a spoon, x squared and ten cubed"),
    ("99¢, aged 18+, 1+1=2, 2x faster", "ninety-nine cents, aged eighteen plus, one plus one equals two, two times faster"),
])
def test_digits_and_symbols_a_person_reads_aloud(text, spoken):
    from ssd_demo.backends.cosyvoice2.text_norm import normalize_english

    assert normalize_english(text) == spoken


def test_text_the_backend_cannot_read_is_a_text_error(synth):
    backend = synth.backend
    for bad in (None, 5, "   ", "\ud800 5", "<|endofprompt|> hi"):
        with pytest.raises(TextError):
            backend.prompt_ids(bad)
        with pytest.raises(TextError):
            backend.split_text(bad)
    # the length limit applies to the text as typed, before numbers become words
    typed = "1234567 " * (backend.max_text_chars // 8)
    from ssd_demo.backends.cosyvoice2.text_norm import normalize_english

    assert len(typed) <= backend.max_text_chars < len(normalize_english(typed))
    backend.prompt_ids(typed)
    assert backend.prompt_ids("a\x00b\x07c") == backend.prompt_ids("a b c")


def test_a_voice_prompt_transcript_is_normalised_like_the_text(folder):
    synth = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT)
    backend = synth.backend
    backend.encoders = FakeEncoders()
    clip = lambda transcript: VoicePrompt(audio=np.zeros(16000, np.float32), sample_rate=16000,  # noqa: E731
                                          transcript=transcript)
    assert backend.prompt_ids("a cat", clip("Take 2 at 10:30.")) == backend.prompt_ids("a cat", clip("Take two at ten thirty."))


def test_a_long_sentence_without_punctuation_is_cut_so_its_end_is_spoken(synth):
    backend = synth.backend
    text = " ".join(["word"] * 400)  # one sentence, far past what one generation may say
    chunks = backend.split_text(text)
    counts = [len(backend.tokenizer([c.text])["input_ids"][0]) for c in chunks]
    assert len(chunks) > 1 and max(counts) <= 2 * backend.chunk_tokens
    assert " ".join(c.text.strip() for c in chunks).rstrip(".") == text


def test_plan_follows_the_official_length_bounds_and_ras(synth):
    backend = synth.backend
    prompt = backend.prompt_ids("a cat sat")
    count = prompt.index(backend.layout.task_id) - 1 - len(backend.default_voice.transcript_tokens)
    config, ras = backend.plan_generation(prompt, backend.default_config())
    assert config.max_new_tokens == MAX_TOKEN_TEXT_RATIO * count  # the official loop's range(max_len)
    assert ras.min_len == MIN_TOKEN_TEXT_RATIO * count and ras.masked_until_min_len == (backend.layout.end_of_speech,)
    assert (ras.top_p, ras.top_k, ras.win_size, ras.tau_r) == (0.8, 25, 10, 0.1)
    greedy, masked = backend.plan_generation(prompt, backend.default_config().with_(temperature=0.0))
    assert greedy.temperature == 0.0 and masked.min_len == ras.min_len
    with pytest.raises(InvalidSettingError, match="repetition-aware"):
        backend.plan_generation(prompt, backend.default_config().with_(temperature=0.7))
    with pytest.raises(ValueError, match="not built by this"):
        backend.plan_generation([1, 2, 3], backend.default_config())


def test_every_stop_id_ends_the_utterance(synth):
    backend = synth.backend
    assert set(synth.config().eos_ids) == set(backend.layout.stop_ids)
    for stop in backend.layout.stop_ids[1:]:  # the two that RAS never masks: drawable from the first token
        with torch.no_grad():
            saved = synth.target.lm_head.bias.clone()
            synth.target.lm_head.bias[stop] = 30.0
        try:
            result = synth.synthesize("a cat sat", mode="ar")
        finally:
            with torch.no_grad():
                synth.target.lm_head.bias.copy_(saved)
        assert result.generation.tokens == [stop] and len(result.audio) == 0


def test_greedy_keeps_the_minimum_length(synth):
    with torch.no_grad():
        saved = synth.target.lm_head.bias.clone()
        synth.target.lm_head.bias[SPEECH] = 30.0  # the end id would win every step
    try:
        result = synth.synthesize("a cat sat", mode="ar", config=synth.config(temperature=0.0))
    finally:
        with torch.no_grad():
            synth.target.lm_head.bias.copy_(saved)
    prompt = synth.backend.prompt_ids(synth.backend.split_text("a cat sat")[0].text)
    count = prompt.index(synth.backend.layout.task_id) - 1 - len(synth.backend.default_voice.transcript_tokens)
    assert result.generation.tokens[-1] == SPEECH and len(result.generation.tokens) == MIN_TOKEN_TEXT_RATIO * count + 1


def test_paragraphs_are_split_as_the_official_front_end_does(synth):
    from ssd_demo.backends.cosyvoice2.backend import split_paragraph

    words = len  # one "token" per character keeps the arithmetic visible
    assert split_paragraph("Hi there", words) == ["Hi there."]  # a full stop is added
    text = "Aaaa bbbb. Cccc dddd! Eeee ffff? Gg."
    assert split_paragraph(text, words, max_tokens=12, min_tokens=15, merge_tokens=4) == [
        "Aaaa bbbb. Cccc dddd!", " Eeee ffff? Gg."]  # packed past 12 while under 15
    assert split_paragraph(text, words, max_tokens=12, min_tokens=8, merge_tokens=5) == [
        "Aaaa bbbb.", " Cccc dddd!", " Eeee ffff? Gg."]  # a tail under 5 joins the chunk before
    assert split_paragraph('He said "go." Then left.', words, max_tokens=5, min_tokens=1, merge_tokens=1) == [
        'He said "go."', " Then left."]  # a closing quote stays with its sentence
    assert split_paragraph("Fine. ... !", words, max_tokens=5, min_tokens=1, merge_tokens=1) == ["Fine."]
    chunks = synth.backend.split_text("It is 7. " + "A very long sentence goes on and on. " * 12)
    assert chunks[0].text.startswith("It is seven.") and all(c.pause_after_ms == 0 for c in chunks)
    assert "".join(c.text for c in chunks) == ("It is seven. " + "A very long sentence goes on and on. " * 12).strip()


@pytest.mark.parametrize("mode", ["ar", "speculative"])
def test_both_decoders_speak_through_token2wav(synth, mode):
    result = synth.synthesize("a cat sat on the mat", mode=mode, config=synth.config(seed=3))
    tokens = result.generation.tokens
    speech = [t for t in tokens if t < SPEECH]
    assert len(speech) >= MIN_TOKEN_TEXT_RATIO * 3  # the minimum length held
    assert result.sample_rate == 24000 and result.audio.dtype == np.float32
    assert len(result.audio) == len(speech) * FLOW.token_mel_ratio * HIFT.hop_length
    assert np.isfinite(result.audio).all() and np.abs(result.audio).max() <= HIFT.audio_limit


@pytest.mark.slow
def test_greedy_speculative_equals_greedy_autoregressive_end_to_end(synth):
    ar = synth.synthesize("the mat", mode="ar", config=synth.config(temperature=0.0))
    spec = synth.synthesize("the mat", mode="speculative", config=synth.config(temperature=0.0))
    assert spec.generation.tokens == ar.generation.tokens
    assert np.array_equal(spec.audio, ar.audio)


def test_bad_text_and_folders_are_refused_clearly(synth, tmp_path):
    with pytest.raises(TextError, match="empty"):
        synth.synthesize("   ", mode="ar")
    with pytest.raises(TextError, match="markup"):
        synth.synthesize("say <|endofprompt|> now", mode="ar")
    with pytest.raises(ModelLoadError, match="missing llm.pt, flow.pt, hift.pt"):
        load_cosyvoice2(tmp_path, default_voice())


def test_a_new_voice_needs_the_prompt_encoders(synth):
    clip = VoicePrompt(audio=np.zeros(16000, np.float32), sample_rate=16000, transcript="hello")
    with pytest.raises(ModelLoadError, match="speech_tokenizer_v2.onnx|onnxruntime"):
        synth.synthesize("a cat", mode="ar", voice_prompt=clip)


def test_the_paper_preset_is_listed_and_says_what_to_download(tmp_path, monkeypatch):
    from ssd_demo.backends import registry as presets
    from ssd_demo.errors import ModelUnavailableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    preset = presets.get_preset("cosyvoice2-paper")
    assert preset.drafts == ("layers",) and preset.sample_rate == 24_000 and "beta 0.4" in preset.description
    available, message = presets.preset_availability("cosyvoice2-paper")
    assert not available and "FunAudioLLM/CosyVoice2-0.5B" in message
    with pytest.raises(ModelUnavailableError, match="not in the local Hugging Face cache"):
        preset.preflight()


def test_the_preset_loads_from_a_populated_offline_cache(folder, tmp_path, monkeypatch):
    from support.llasa_fixtures import install_in_hub_cache
    from ssd_demo.backends.cosyvoice2 import loading

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    install_in_hub_cache(folder, tmp_path, loading.REPO)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert loading.preflight().joinpath("CosyVoice-BlankEN", "config.json").is_file()
    # The preset loads the released shapes strictly: the tiny flow.pt is refused, naming the tensors.
    with pytest.raises(ModelLoadError, match="flow state dict does not match.*input_embedding.weight"):
        loading.load_from_hub("cpu")


def test_a_trained_draft_replaces_only_what_it_holds(folder, tmp_path):
    from safetensors.torch import save_file
    from ssd_demo.backends.cosyvoice2.loading import trained_draft_state

    untrained = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT).drafts["layers"]
    head = {"lm_head.bias": torch.full_like(untrained.lm_head.bias, 0.5),
            "model.layers.0.mlp.up_proj.weight": torch.zeros_like(untrained.model.layers[0].mlp.up_proj.weight)}
    save_file(head, str(tmp_path / "draft.safetensors"))
    synth = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT,
                            draft_state=trained_draft_state(str(tmp_path)))
    draft, target = synth.drafts["layers"], synth.target
    assert torch.equal(draft.lm_head.bias, head["lm_head.bias"]) and not torch.equal(target.lm_head.bias, draft.lm_head.bias)
    assert not target.model.layers[0].mlp.up_proj.weight.eq(0).all()  # the target kept its own
    assert torch.equal(draft.model.layers[5].self_attn.q_proj.weight, target.model.layers[7].self_attn.q_proj.weight)
    assert synth.synthesize("the mat", mode="speculative").generation.tokens
    with pytest.raises(ModelLoadError, match="does not have"):
        load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT,
                        draft_state={"model.layers.9.mlp.up_proj.weight": torch.zeros(1)})
    with pytest.raises(ModelLoadError, match="no such directory"):
        trained_draft_state(str(tmp_path / "elsewhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no draft.safetensors"):
        trained_draft_state(str(tmp_path / "empty"))


def test_a_clip_with_and_without_transcript_prompts_as_the_official_modes(folder):
    synth = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT)
    backend = synth.backend
    backend.encoders = FakeEncoders()
    layout = backend.layout
    with_text = VoicePrompt(audio=np.zeros(16000, np.float32), sample_rate=16000, transcript="hello there")
    zero_shot = backend.prompt_ids("a cat", with_text)
    assert tuple(zero_shot[zero_shot.index(layout.task_id) + 1:]) == (3, 1, 4, 1, 5, 9)
    no_text = VoicePrompt(audio=np.zeros(16000, np.float32), sample_rate=16000, transcript="  ")
    cross_lingual = backend.prompt_ids("a cat", no_text)  # the clip's voice in the flow model only
    assert cross_lingual[-1] == layout.task_id and cross_lingual[1:-1] == [
        layout.text_offset + t for t in backend.tokenizer(["a cat"])["input_ids"][0]]
    result = synth.synthesize("a cat", mode="ar", voice_prompt=no_text)
    assert len(result.audio) > 0
    calls = FakeEncoders.calls
    synth.synthesize("a cat", mode="ar", voice_prompt=no_text)
    assert FakeEncoders.calls == calls  # encoded once per clip and transcript
    with pytest.raises(ValueError, match="not built by this"):
        backend.tokens_to_audio([1, 2], prompt_ids=[layout.sos_id, layout.task_id, 7, 7])


class ClipEncoders:
    """Stands in for the ONNX encoders with features that tell clips apart: the speaker embedding holds
    the clip's first sample."""

    def encode(self, audio, sample_rate, transcript_tokens):
        return VoiceFeatures.aligned(transcript_tokens, [3, 1, 4, 1, 5, 9], torch.zeros(12, MELS),
                                     torch.full((SPEAKER,), float(audio[0])))


def _untranscribed_clip(level: float) -> VoicePrompt:
    return VoicePrompt(audio=np.full(16000, level, np.float32), sample_rate=16000, transcript="")


def _record_speakers(backend) -> dict:
    """The speaker embedding token2wav is given, by thread: what the flow model conditions on."""
    seen, inference = {}, backend.flow.inference

    def recording(tokens, prompt_tokens, prompt_mel, speaker_embedding, **kwargs):
        seen[threading.current_thread().name] = float(speaker_embedding.reshape(-1)[0])
        return inference(tokens, prompt_tokens, prompt_mel, speaker_embedding, **kwargs)

    backend.flow.inference = recording
    return seen


def test_clips_without_transcripts_keep_their_own_voices(folder):
    # Neither clip puts anything of itself in the LM's prompt, so the ids are equal; the voice rides with them.
    backend = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT).backend
    backend.encoders = ClipEncoders()
    seen = _record_speakers(backend)
    low, high = _untranscribed_clip(0.25), _untranscribed_clip(0.5)
    first, second = backend.prompt_ids("a cat", low), backend.prompt_ids("a cat", high)
    assert first == second
    for prompt, level in ((first, 0.25), (second, 0.5), (first, 0.25)):
        backend.tokens_to_audio([1, 2, 3, 4], prompt_ids=prompt)
        assert seen[threading.current_thread().name] == level
    # Passed on as a plain list, the ids no longer say which voice: refused unless the voice is named.
    with pytest.raises(ValueError, match="more than one voice"):
        backend.tokens_to_audio([1, 2, 3, 4], prompt_ids=list(first))
    config, _ = backend.plan_generation(list(first), backend.default_config(), high)
    assert config.max_new_tokens == MAX_TOKEN_TEXT_RATIO * first.text_count


def test_two_concurrent_requests_with_the_same_text_keep_their_own_voices(folder):
    # The interleaving that swapped voices when prompts were remembered by their ids alone: both requests
    # build their prompt before either reaches token2wav.
    synth = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT)
    backend = synth.backend
    backend.encoders = ClipEncoders()
    seen = _record_speakers(backend)
    both_built, one_at_a_time = threading.Barrier(2, timeout=30), threading.Lock()
    build, generate = backend.prompt_ids, synth._generate

    def build_then_wait(text, voice_prompt=None):
        prompt = build(text, voice_prompt)
        both_built.wait()
        return prompt

    def generate_alone(*args, **kwargs):  # the LM runs one request at a time; the prompts are already built
        with one_at_a_time:
            return generate(*args, **kwargs)

    backend.prompt_ids, synth._generate = build_then_wait, generate_alone
    errors = []

    def request(level):
        try:
            result = synth.synthesize("a cat", mode="ar", voice_prompt=_untranscribed_clip(level))
            assert len(result.audio) > 0
        except Exception as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=request, args=(level,), name=f"voice-{level}") for level in (0.25, 0.5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert seen == {"voice-0.25": 0.25, "voice-0.5": 0.5}


def test_a_checkpoint_with_the_real_tokenizer_files_loads_and_prompts(tmp_path):
    # The Hub folder's CosyVoice-BlankEN has vocab.json, merges.txt and tokenizer_config.json, no tokenizer.json.
    from support.cosyvoice2 import check_official_special_ids, write_qwen_style_tokenizer

    root = build_tiny_checkpoint(tmp_path / "CosyVoice2-0.5B")
    for path in (root / "CosyVoice-BlankEN").iterdir():
        if path.name != "config.json":
            path.unlink()
    vocabulary = write_qwen_style_tokenizer(root)
    synth = load_cosyvoice2(root, default_voice(), flow_config=FLOW, hift_config=HIFT)
    backend = synth.backend
    check_official_special_ids(backend.tokenizer, vocabulary)
    prompt = backend.prompt_ids("a cat [breath] sat")
    text = [t - backend.layout.text_offset for t in prompt[4: prompt.index(backend.layout.task_id)]]
    assert text == backend.tokenizer.convert_tokens_to_ids(backend.tokenizer.tokenize("a cat [breath] sat"))
    assert backend.tokenizer.convert_tokens_to_ids("[breath]") in text
    assert len(synth.synthesize("a cat sat", mode="ar").audio) > 0


@pytest.fixture(scope="module")
def release_synth(folder):
    return load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT, rules="release")


def _with_bias(synth, ids, value):
    """The target's decoder bias raised on `ids` (restored by the caller from the returned copy)."""
    saved = synth.target.lm_head.bias.detach().clone()
    with torch.no_grad():
        synth.target.lm_head.bias[list(ids)] = value
    return saved


@pytest.mark.parametrize("mode", ["ar", "speculative"])
def test_release_era_rules_keep_every_stop_id_out_until_the_minimum_length(release_synth, synth, mode):
    backend = release_synth.backend
    stops = backend.layout.stop_ids
    prompt = backend.prompt_ids(backend.split_text("a cat sat")[0].text)
    min_len = MIN_TOKEN_TEXT_RATIO * prompt.text_count
    _, ras = backend.plan_generation(prompt, backend.default_config())
    assert ras.redrawn_until_min_len == stops and ras.masked_until_min_len == () and ras.redraw_may_repeat
    for value in (2.0, 30.0):  # stop ids likely, then certain: none before the minimum length either way
        for seed in range(3):
            saved = _with_bias(release_synth, stops[1:], value)
            try:
                tokens = release_synth.synthesize("a cat sat", mode=mode, config=release_synth.config(seed=seed)).generation.tokens
            finally:
                with torch.no_grad():
                    release_synth.target.lm_head.bias.copy_(saved)
            assert not set(tokens[:min_len]) & set(stops)
            if value == 30.0:
                assert len(tokens) == min_len + 1 and tokens[-1] in stops[1:]
    # The default rules (the official code since 2026-02-11) mask the end id only: 6562 or 6563 may end early.
    saved = _with_bias(synth, stops[1:], 30.0)
    try:
        tokens = synth.synthesize("a cat sat", mode=mode, config=synth.config(seed=0)).generation.tokens
    finally:
        with torch.no_grad():
            synth.target.lm_head.bias.copy_(saved)
    assert len(tokens) == 1 and tokens[0] in stops[1:]
    saved = _with_bias(synth, stops[:1], 30.0)
    try:
        tokens = synth.synthesize("a cat sat", mode=mode, config=synth.config(seed=0)).generation.tokens
    finally:
        with torch.no_grad():
            synth.target.lm_head.bias.copy_(saved)
    assert len(tokens) == min_len + 1 and tokens[-1] == stops[0]


def test_release_era_greedy_masks_every_stop_id_and_unknown_rules_are_refused(release_synth, folder):
    backend = release_synth.backend
    prompt = backend.prompt_ids("a cat sat")
    _, masked = backend.plan_generation(prompt, backend.default_config().with_(temperature=0.0))
    assert masked.masked_until_min_len == backend.layout.stop_ids
    with pytest.raises(InvalidSettingError, match="head, release"):
        load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT, rules="paper")


def test_prompt_ids_and_split_text_refuse_the_same_texts(synth):
    backend = synth.backend
    for text in ("...", "!?", " - , ", "a.", "7", "\ud800", "   ", "<|im_end|>", "ok!"):
        refusals = []
        for call in (backend.split_text, backend.prompt_ids):
            try:
                call(text)
                refusals.append(None)
            except TextError as error:
                refusals.append(type(error))
        assert refusals[0] == refusals[1], text
    with pytest.raises(TextError, match="nothing to say"):
        backend.prompt_ids("...")  # accepted before, though split_text refused it


def test_the_official_text_normaliser_reads_as_the_official_and_chunks_are_not_read_twice(folder):
    synth = load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT, text_normalizer="official")
    backend = synth.backend
    chunks = backend.split_text('She said, "Meet me at 5:30." It was 5 November 1999.')
    assert [c.text for c in chunks] == ['She said, \\"Meet me at five thirty.\\" It was the fifth of november nineteen ninety nine.']
    # the chunk is spoken form already: its tokens are the chunk's own (wetext would escape the quotes again)
    assert backend._text_tokens(chunks[0].text) == text_tokens(backend.tokenizer, chunks[0].text)
    with pytest.raises(InvalidSettingError, match="default, official"):
        load_cosyvoice2(folder, default_voice(), flow_config=FLOW, hift_config=HIFT, text_normalizer="loud")


def test_chinese_text_is_read_by_the_chinese_normaliser_and_cut_at_chinese_sentence_ends(synth):
    chunks = synth.backend.split_text("今天是2024年5月3日。价格涨了3.5%")
    assert [c.text for c in chunks] == ["今天是二零二四年五月三日。价格涨了百分之三点五。"]


def test_a_request_may_choose_the_text_normaliser(synth):
    default = synth.script("It was 5 November 1999.")
    official = synth.script("It was 5 November 1999.", text_normalizer="official")
    assert default.chunks[0].text == "It was the fifth of November nineteen ninety-nine."
    assert official.chunks[0].text == "It was the fifth of november nineteen ninety nine."
    assert synth.backend.text_normalizer == "default"  # the request's choice is its own
    with pytest.raises(InvalidSettingError, match="default, official"):
        synth.script("Hi.", text_normalizer="loud")
