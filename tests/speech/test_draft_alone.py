"""The draft model decoding alone (mode "draft"): the listening studies' optional anchor "anchor draft[=NAME]",
rendered through the same `DecodingSystem` path as every other system; draft heads cannot speak alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ssd_demo.engine.draft_heads import DraftHeads, HeadsConfig
from ssd_demo.errors import InputError
from ssd_demo.listening.stimuli import create_stimulus_set, synthesizer_renderer
from ssd_demo.speech.synthesis import Synthesizer
from ssd_demo.speech.system import parse_system
from support.toy_backend import build_toy_synthesizer


@pytest.fixture(scope="module")
def toy() -> Synthesizer:
    return build_toy_synthesizer(max_new_tokens=24)


def test_the_draft_alone_is_autoregressive_decoding_with_the_draft_as_the_model(toy):
    # "copy" has the target's weights: alone it must speak exactly what the target speaks alone.
    ar = toy.synthesize("Hello there.", mode="ar", config=toy.config(seed=5))
    copy = toy.synthesize("Hello there.", mode="draft", config=toy.config(seed=5), draft="copy")
    assert copy.mode == "draft" and copy.generation.tokens == ar.generation.tokens
    assert np.array_equal(copy.audio, ar.audio)
    small = toy.synthesize("Hello there.", mode="draft", config=toy.config(seed=5), draft="small")
    assert small.generation.tokens != ar.generation.tokens  # the one-layer draft is another model


def test_draft_heads_cannot_decode_alone_and_the_default_skips_them(toy):
    heads = DraftHeads(HeadsConfig(hidden=32, inner=8, blocks=1))
    voice = Synthesizer(toy.backend, toy.target, {"heads": heads, "small": toy.drafts["small"]}, default_draft="heads")
    assert voice.solo_draft() == "small"  # the default draft is heads: the first draft model instead
    with pytest.raises(InputError, match="draft heads on the target's hidden state"):
        voice.synthesize("Hello.", mode="draft", draft="heads")
    with pytest.raises(InputError, match="unknown draft 'nope'"):
        voice.solo_draft("nope")
    only_heads = Synthesizer(toy.backend, toy.target, {"heads": heads})
    with pytest.raises(InputError, match="not a model that decodes alone"):
        only_heads.solo_draft()


def test_the_draft_alone_anchor_renders_in_a_stimulus_set_and_records_its_draft(toy, tmp_path):
    stimulus_set = create_stimulus_set("alone", ["Hello there."], ["AR", "anchor draft=copy", "anchor draft"],
                                       synthesizer_renderer(toy), root=tmp_path)
    manifest = json.loads((stimulus_set.root / "manifest.json").read_text())
    clips = {c["system"]: c for c in manifest["items"][0]["clips"]}
    assert clips["anchor draft=copy"]["settings"]["draft"] == "copy"
    assert clips["anchor draft"]["settings"]["draft"] == "small"  # the voice's default draft
    assert clips["anchor draft=copy"]["settings"]["mode"] == "draft"
    assert not {"beta", "draft_len", "acceptance"} & set(clips["anchor draft"]["settings"])  # AR-like: no K or beta
    assert clips["anchor draft=copy"]["sha256"] == clips["AR"]["sha256"]  # the target's copy alone is the AR clip
    assert parse_system("anchor draft=copy").check() is None
