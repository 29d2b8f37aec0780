"""The backend contract (`ssd_demo.speech.backend.Backend`): every model family inherits it, every hook has its
default there, and nothing in the package asks a backend whether it has a hook (getattr/hasattr); how a chunk's
tokens are generated is a `ChunkGenerator` handed to the Synthesizer, which the vLLM engine's uses too."""

from support.paths import REPOSITORY

import ast
import inspect
import re

import numpy as np
import pytest
import torch
from support.toy_backend import EOS_ID, SPEECH_OFFSET, ToyBackend, build_toy_synthesizer

from ssd_demo import Backend
from ssd_demo.backends.cosyvoice2.backend import CosyVoice2Backend
from ssd_demo.backends.embedded import EmbeddedBackend
from ssd_demo.backends.llasa import LlasaBackend
from ssd_demo.errors import InputError, InvalidSettingError
from ssd_demo.speech.chunk_generator import OUR_ENGINE
from ssd_demo.speech.results import TextChunk
from ssd_demo.speech.synthesis import Synthesizer

PACKAGE = REPOSITORY / "ssd_demo"
BACKENDS = (EmbeddedBackend, LlasaBackend, CosyVoice2Backend, ToyBackend)
#: The contract's members but the generic `name`, whose getattr elsewhere (of anything) would not be a probe.
MEMBERS = ({n for n in vars(Backend) if not n.startswith("_")} | set(Backend.__annotations__)) - {"name"}


def _probes(source: str, where: str) -> list[str]:
    """getattr/hasattr calls in `source` that ask a backend for something: on an expression naming a backend, for
    the attribute "backend", or for any member of the contract."""
    found = []
    if "getattr(" not in source and "hasattr(" not in source:
        return found
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
            continue
        owner, attribute = node.args[0], node.args[1]
        asked = attribute.value if isinstance(attribute, ast.Constant) else None
        if re.search(r"\bbackend\b", ast.unparse(owner)) or asked == "backend" or asked in MEMBERS:
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_nothing_in_the_package_probes_a_backend_with_getattr_or_hasattr():
    probes = [probe for path in sorted(PACKAGE.rglob("*.py"))
              for probe in _probes(path.read_text(encoding="utf-8"), str(path.relative_to(REPOSITORY)))]
    assert not probes, ("call the hook plainly (its default is declared on ssd_demo.speech.backend.Backend): "
                        f"{probes}")


def test_the_probe_check_sees_the_probes_it_forbids():
    sample = ("getattr(synth.backend, 'x', None)\nhasattr(self.backend, 'text_normalizer')\n"
              "getattr(synth, 'backend', None)\ngetattr(family, 'split_text', None)\ngetattr(args, 'name')\n"
              "getattr(model, 'config', None)\n")
    assert [probe.split(":")[1] for probe in _probes(sample, "sample")] == ["1", "2", "3", "4"]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_every_backend_inherits_the_contract_and_overrides_hooks_with_their_parameters(backend):
    assert issubclass(backend, Backend)
    assert not inspect.isabstract(backend)
    for name, default in vars(Backend).items():
        override = getattr(backend, name)
        if not callable(default) or name.startswith("_") or override is default:
            continue
        wanted = list(inspect.signature(default).parameters)
        given = list(inspect.signature(override).parameters)
        assert given[:len(wanted)] == wanted, f"{backend.__name__}.{name}{given} does not take {wanted}"


def test_the_required_members_are_required():
    class Mute(Backend):
        name, sample_rate, max_text_chars, eos_token_id, licence = "mute", 16_000, 10, 0, "none"

    with pytest.raises(TypeError, match="abstract"):
        Mute()


def test_a_backend_that_overrides_no_hook_speaks_with_every_default():
    synth = build_toy_synthesizer(max_new_tokens=8)
    backend, config = synth.backend, synth.config(seed=3)
    assert backend.split_text("Hi there. Bye.") == [TextChunk("Hi there. Bye.")]
    assert backend.left_out("Hi") == "" and synth.left_out("Hi") == ""
    assert backend.plan_generation([1, 2], config) == (config, None)
    assert backend.forced_tokens([1, 2]) is None and backend.window_codec() is None
    assert backend.acoustic_embeddings(8) is None and backend.token_label(105) == "105"
    assert (backend.max_context, backend.supports_voice_prompt, backend.max_prompt_seconds) == (None, False, None)
    assert backend.text_normalizers == () and backend.text_normalizer == "default"
    assert torch.equal(synth.grouping_embeddings(), synth.target.get_input_embeddings().weight)
    with pytest.raises(InvalidSettingError, match="CosyVoice 2's"):
        synth.script("Hi", text_normalizer="official")
    result = synth.synthesize("Hi", config=config)
    assert len(result.chunks) == 1 and result.wall_seconds is None  # one chunk, decoded once its tokens came


class Recording:
    """Our engine, handed in, recording each chunk it was asked for; `commits_rounds` as given."""

    def __init__(self, commits_rounds: bool):
        self.commits_rounds, self.asked = commits_rounds, []

    def describe(self, synthesizer):
        return "recorded"

    def check(self, mode, config):
        if config.acceptance == "pcg":
            raise InputError("no pcg here", param="acceptance")

    def generate_chunk(self, synthesizer, prompt, mode, config, draft_name, **hooks):
        self.asked.append((list(prompt), mode, config.seed, draft_name))
        return OUR_ENGINE.generate_chunk(synthesizer, prompt, mode, config, draft_name, **hooks)


class Windowed(ToyBackend):
    """The toy voice with a codec that streams windows: the embedded voice's, a tone per code."""

    def window_codec(self, prompt_ids=None):
        from ssd_demo.speech.streaming import CodecWindows, WindowCodec

        codes = lambda ids: [t - SPEECH_OFFSET for t in ids if SPEECH_OFFSET <= t < EOS_ID]  # noqa: E731
        decode = lambda before, part: self.tokens_to_audio([SPEECH_OFFSET + c for c in part])  # noqa: E731
        return WindowCodec(codes, decode, 640, CodecWindows(window=4, context=0, lookahead=0, crossfade=0))


@pytest.mark.parametrize("commits_rounds", [True, False])
def test_a_chunk_generator_handed_in_generates_every_chunk(commits_rounds):
    ours = build_toy_synthesizer(max_new_tokens=16)
    generator = Recording(commits_rounds)
    handed = Synthesizer(Windowed(16), ours.target, ours.drafts, chunk_generator=generator)
    config = ours.config(seed=5)
    for mode in ("ar", "speculative"):
        alone = ours.synthesize("Two words", mode=mode, config=config)
        pieces = list(handed.stream("Two words", mode=mode, config=config))
        assert generator.asked[-1] == (ours.script("Two words").prompts[0], mode, 5, "small")
        assert len(alone.generation.tokens) > 8  # two windows of codes at least
        # rounds reported: a piece per codec window as the LM goes on; else the chunk's audio at once
        assert (len(pieces) > 1) == commits_rounds
        assert np.array_equal(np.concatenate([p.audio for p in pieces]), alone.audio)
    assert handed.engine_description() == "recorded"
    with pytest.raises(InputError, match="no pcg"):
        handed.check_decoding("speculative", config.with_(acceptance="pcg"))


class FakeVllm:
    """A started vLLM engine process that answers every prompt with the same speech tokens."""

    version = "0.0-test"

    def __init__(self, spec):
        self.spec = spec

    @classmethod
    def start(cls, spec):
        return cls(spec)

    def generate(self, prompts, limits, **settings):
        from ssd_demo.backends.vllm.worker import WorkerBatch

        answer = [SPEECH_OFFSET + 1, SPEECH_OFFSET + 2, SPEECH_OFFSET + 3, SPEECH_OFFSET + 4, SPEECH_OFFSET + 5, EOS_ID]
        return WorkerBatch([list(answer) for _ in prompts], ["stop"] * len(prompts), [0.01] * len(prompts), 0.01)

    def close(self):
        pass


def test_the_vllm_engine_speaks_through_its_chunk_generator_and_streams_whole_chunks(monkeypatch):
    from ssd_demo.backends.vllm import engines
    from ssd_demo.backends.vllm.synthesizer import VllmSynthesizer

    monkeypatch.setattr(engines.VllmWorker, "start", FakeVllm.start)

    class LlasaShaped(Windowed):
        name = "llasa"  # a family the vLLM engine serves

    ours = build_toy_synthesizer()
    for folder, model in (("target", ours.target), *ours.drafts.items()):
        model.name_or_path = folder
    on_vllm = VllmSynthesizer.wrap(Synthesizer(LlasaShaped(), ours.target, ours.drafts))
    assert isinstance(on_vllm.chunk_generator, engines.VllmEngines) and not on_vllm.chunk_generator.commits_rounds
    heard = []
    for mode in ("ar", "speculative"):
        stream = on_vllm.stream("Hi", mode=mode, config=on_vllm.config(seed=1), on_commit=heard.append)
        pieces = list(stream)
        assert len(pieces) == 1 and stream.result.generation.tokens[-1] == EOS_ID  # the chunk at once, no windows
        assert np.array_equal(pieces[0].audio, on_vllm.backend.tokens_to_audio(stream.result.generation.tokens))
    assert heard == [] and len(on_vllm.engines()) == 2
    assert on_vllm.engine_description() == "vLLM 0.0-test and its own kernels"
    with pytest.raises(InputError, match="SSD's rule"):
        on_vllm.check_decoding("speculative", on_vllm.config(acceptance="topk"))
    on_vllm.close()
    assert on_vllm.engines() == []
