"""The vLLM engine behind the Synthesizer API on config-true Llasa stand-ins (Llasa-1B drafting Llasa-3B's
shapes, the real 193,800-token layout, a 65,536-code codec): our text front end and codec around vLLM's LM.
Each engine start costs about a minute on the CPU, so one synthesizer serves the module."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.llasa_fixtures import build_config_true_family
from ssd_demo.backends.llasa_loading import load_custom_pair
from ssd_demo.backends.vllm import use_engine
from support.vllm_support import needs_vllm

pytestmark = [pytest.mark.vllm, needs_vllm]

TEXTS = ["Hello there.", "A second, longer sentence to speak.", "Three.",
         # over the backend's 300-character chunk size: several chunks, with pauses between them
         "This sentence is long enough to be spoken in two chunks by the Llasa front end. " * 4]


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return build_config_true_family(tmp_path_factory.mktemp("llasa-vllm"), sizes=("1B", "3B"))


@pytest.fixture(scope="module")
def synthesizers(family):
    ours = load_custom_pair(str(family.sizes["3B"]), str(family.sizes["1B"]), codec_ref=str(family.codec),
                            device="cpu")
    on_vllm = use_engine(ours, "vllm")
    yield ours, on_vllm
    on_vllm.close()


def _speech_only(tokens, backend) -> bool:
    return all(backend.vocab.is_speech(t) or t == backend.eos_token_id for t in tokens)


def test_both_decoders_run_on_vllm_and_decode_through_our_codec(synthesizers):
    ours, on_vllm = synthesizers
    backend = on_vllm.backend
    assert backend is ours.backend and use_engine(on_vllm, "vllm") is on_vllm
    for mode, beta in (("ar", 0.0), ("speculative", 0.3)):
        config = on_vllm.config(max_new_tokens=16, seed=3, draft_len=3, beta=beta)
        result = on_vllm.synthesize("Hello there.", mode=mode, config=config)
        tokens = result.generation.tokens
        assert 0 < len(tokens) <= 16 and _speech_only(tokens, backend)
        assert np.allclose(result.audio, backend.tokens_to_audio(tokens), atol=1e-6)  # the same codec path
        stats = result.generation.stats
        assert stats.mode == mode and stats.seed == 3
        assert (stats.drafted_tokens > 0) == (mode == "speculative")
    engines = on_vllm.engines()
    assert len(engines) == 2  # one engine per decoder, kept for the next call
    on_vllm.synthesize("Three.", mode="speculative", config=on_vllm.config(max_new_tokens=8, draft_len=3, beta=0.0))
    assert on_vllm.engines() == engines  # a new beta is the request's, not a new engine


def test_a_batch_of_texts_renders_in_one_submission(synthesizers):
    _, on_vllm = synthesizers
    config = on_vllm.config(max_new_tokens=12, seed=0, draft_len=3, beta=0.3)
    render = on_vllm.render_batch(TEXTS, mode="speculative", config=config)
    backend = on_vllm.backend
    assert [t.text for t in render.texts] == TEXTS
    chunks = [len(on_vllm.script(text).chunks) for text in TEXTS]
    assert [len(t.chunk_tokens) for t in render.texts] == chunks and chunks[-1] > 1
    for text in render.texts:
        assert all(_speech_only(tokens, backend) for tokens in text.chunk_tokens)
        assert 0 < text.latency_seconds <= render.lm_seconds + 1e-6
    one = render.texts[0]
    assert np.allclose(one.audio, backend.tokens_to_audio(one.chunk_tokens[0]), atol=1e-6)
    assert render.tokens == sum(len(t) for text in render.texts for t in text.chunk_tokens)
    assert render.tokens_per_second > 0 and render.audio_seconds_per_second > 0
    assert render.batch.draft_tokens > 0


def test_the_vllm_batch_command_reports_throughput(family, tmp_path, capsys):
    from ssd_demo.__main__ import main

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS[:3]) + "\n\n", encoding="utf-8")
    out = tmp_path / "batch.json"
    code = main(["vllm-batch", str(texts), "--mode", "ar", "--target-model", str(family.sizes["3B"]),
                 "--draft-model", str(family.sizes["1B"]), "--codec", str(family.codec), "--device", "cpu",
                 "--max-new-tokens", "8", "--out-dir", str(tmp_path / "wavs"), "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    numbers = json.loads(out.read_text())
    assert numbers["texts"] == 3 and numbers["tokens"] > 0 and numbers["tokens_per_second"] > 0
    assert len(numbers["latency_seconds"]["each"]) == 3
    assert sorted(p.name for p in (tmp_path / "wavs").iterdir()) == ["text_000.wav", "text_001.wav", "text_002.wav"]
    assert "tokens/s" in capsys.readouterr().out


def test_the_speech_server_on_vllm_streams_to_clients_at_once_each_with_its_own_beta(synthesizers):
    import threading

    import httpx
    from openai import OpenAI

    from ssd_demo.server.service import SpeechService
    from support.speech_server import serve_in_thread

    _, on_vllm = synthesizers
    engines = on_vllm.engines()
    service = SpeechService("custom", on_vllm, workers=4, max_waiting=4)
    server, thread, url = serve_in_thread(service)
    try:
        client = OpenAI(base_url=url + "/v1", api_key="not-needed")
        with client.audio.speech.with_streaming_response.create(
                model="custom", voice="v", input="Hello there.", response_format="pcm",
                extra_body={"max_new_tokens": 12, "seed": 4, "draft_len": 3, "beta": 0.3}) as response:
            streamed = b"".join(response.iter_bytes())
        alone = on_vllm.synthesize("Hello there.", config=on_vllm.config(max_new_tokens=12, seed=4, draft_len=3, beta=0.3))
        assert len(streamed) == 2 * len(alone.audio) > 0

        answers, errors = {}, []

        def ask(index: int) -> None:
            body = {"model": "custom", "voice": "v", "input": TEXTS[index % 3], "response_format": "pcm",
                    "max_new_tokens": 12, "seed": index, "draft_len": 3, "beta": [0.0, 0.3][index % 2],
                    "stream_format": "sse"}
            try:
                with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=600) as reply:
                    events = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
                answers[index] = events[-1]
            except Exception as error:  # noqa: BLE001 - reported below with the request it came from
                errors.append((index, error))

        clients = [threading.Thread(target=ask, args=(index,)) for index in range(6)]
        for client_thread in clients:
            client_thread.start()
        for client_thread in clients:
            client_thread.join(timeout=600)
        assert not errors and sorted(answers) == list(range(6))
        for index, done in answers.items():
            assert done["type"] == "speech.audio.done" and done["usage"]["output_tokens"] > 0
            assert done["ssd"]["mode"] == "speculative" and done["ssd"]["seed"] == index
        assert on_vllm.engines() == engines  # six requests at two betas: the same two engines
        assert service.load == 0
    finally:
        server.should_exit = True
        thread.join(timeout=10)
