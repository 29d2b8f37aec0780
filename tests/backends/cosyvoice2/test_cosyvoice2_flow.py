"""CosyVoice 2's flow model (tokens -> mel): shapes, determinism, conditioning, strict loading, layout.

Numerical parity with the official implementation needs its code and packages we do not ship; it is
checked by `python -m scripts.cosyvoice2_parity_flow`. Here: tiny random models, and the
full-size module's parameter layout against the official one's (recorded by that script).
"""

from support.paths import TEST_DATA

import pytest
import torch

from ssd_demo.backends.cosyvoice2.flow import CFMConfig, CosyVoice2Flow, FlowConfig, load_flow, official_noise
from ssd_demo.backends.cosyvoice2.flow_decoder import EstimatorConfig
from ssd_demo.backends.cosyvoice2.flow_encoder import EncoderConfig

KEYS = TEST_DATA / "cosyvoice2_flow_keys.txt"
MELS, SPEAKER = 8, 6


def tiny_config(**cfm) -> FlowConfig:
    return FlowConfig(
        vocab_size=40, input_size=16, n_mels=MELS, spk_embed_dim=SPEAKER,
        encoder=EncoderConfig(input_size=16, d_model=16, heads=2, ffn_units=32, num_blocks=2, num_up_blocks=1),
        estimator=EstimatorConfig(n_mels=MELS, channels=16, heads=2, head_dim=8, n_blocks=1, num_mid_blocks=2),
        cfm=CFMConfig(n_timesteps=3, noise_frames=200, **cfm))


def tiny_model(seed: int = 0, **cfm) -> CosyVoice2Flow:
    torch.manual_seed(seed)
    model = CosyVoice2Flow(tiny_config(**cfm)).eval()
    with torch.no_grad():  # so no LayerNorm or bias stays at its trivial initial value
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def inputs(tokens: int = 7, prompt: int = 4, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 40, (tokens,), generator=generator),
            torch.randint(0, 40, (1, prompt), generator=generator),
            torch.randn(1, 2 * prompt, MELS, generator=generator), torch.randn(1, SPEAKER, generator=generator))


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def test_mel_covers_the_generated_tokens_only(model):
    for tokens, prompt in ((7, 4), (5, 0), (1, 3)):
        mel = model.inference(*inputs(tokens, prompt))
        assert mel.shape == (1, MELS, 2 * tokens) and mel.dtype == torch.float32
        assert torch.isfinite(mel).all()


def test_same_noise_same_mel(model):
    args = inputs()
    assert torch.equal(model.inference(*args), model.inference(*args))  # the fixed noise, like the official
    seeded = [model.inference(*args, noise=torch.Generator().manual_seed(s)) for s in (5, 5, 6)]
    assert torch.equal(seeded[0], seeded[1]) and not torch.allclose(seeded[0], seeded[2])
    # The default is the fixed noise's first frames; passing it explicitly changes nothing.
    assert torch.equal(model.inference(*args, noise=model.decoder.fixed_noise()), model.inference(*args))


def test_official_noise_is_the_seed_0_draw():
    with torch.random.fork_rng():
        torch.manual_seed(0)  # what the official sampler does at construction
        expected = torch.randn([1, 80, 50 * 300])
    assert torch.equal(official_noise(), expected)


def test_noise_that_is_too_short_is_refused(model):
    tokens, prompt, prompt_mel, speaker = inputs()
    with pytest.raises(ValueError, match="noise must be"):
        model.inference(tokens, prompt, prompt_mel, speaker, noise=torch.randn(1, MELS, 5))
    with pytest.raises(ValueError, match="torch.Generator for longer"):
        model.inference(torch.zeros(150, dtype=torch.long), prompt, prompt_mel, speaker)  # 308 frames > 200


def test_prompt_and_speaker_condition_the_mel(model):
    tokens, prompt, prompt_mel, speaker = inputs()
    base = model.inference(tokens, prompt, prompt_mel, speaker)
    assert not torch.allclose(base, model.inference(tokens, prompt, prompt_mel + 1.0, speaker))
    assert not torch.allclose(base, model.inference(tokens, (prompt + 1) % 40, prompt_mel, speaker))
    assert not torch.allclose(base, model.inference(tokens, prompt, prompt_mel, -speaker))


def test_prompt_mel_must_pair_with_the_prompt_tokens(model):
    tokens, prompt, prompt_mel, speaker = inputs(prompt=3)  # 6 frames: a transposed mel is told apart
    with pytest.raises(ValueError, match="frames"):
        model.inference(tokens, prompt, prompt_mel[:, :-1], speaker)
    with pytest.raises(ValueError, match=r"\[1, frames, 8\]"):
        model.inference(tokens, prompt, prompt_mel.transpose(1, 2), speaker)


def test_one_step_is_guided_euler_from_the_noise():
    """n = 1 on the cosine grid is t: 0 -> 1, x_1 = z + (1.7 v(z | conditions) - 0.7 v(z | nothing))."""
    model = tiny_model()
    tokens, prompt, prompt_mel, speaker = inputs()
    mel = model.inference(tokens, prompt, prompt_mel, speaker, n_timesteps=1)
    with torch.no_grad():
        mu = model.encode(torch.cat([prompt, tokens.unsqueeze(0)], dim=1))
        frames = mu.shape[2]
        spks = model.spk_embed_affine_layer(torch.nn.functional.normalize(speaker, dim=1))
        cond = torch.zeros_like(mu)
        cond[:, :, :prompt_mel.shape[1]] = prompt_mel.transpose(1, 2)
        z = official_noise(MELS, 200)[:, :, :frames]
        mask, t = torch.ones(1, 1, frames), torch.zeros(1)
        estimator = model.decoder.estimator
        v_cond = estimator(z, mask, mu, t, spks, cond)
        v_free = estimator(z, mask, torch.zeros_like(mu), t, torch.zeros_like(spks), torch.zeros_like(cond))
        expected = (z + 1.7 * v_cond - 0.7 * v_free)[:, :, prompt_mel.shape[1]:]
    torch.testing.assert_close(mel, expected, atol=1e-5, rtol=1e-5)


def test_strict_load_round_trip(model, tmp_path):
    args = inputs()
    path = tmp_path / "flow.pt"
    torch.save(model.state_dict(), path)
    for source in (path, model.state_dict()):
        loaded = load_flow(source, tiny_config())
        assert not loaded.training
        assert torch.equal(loaded.inference(*args), model.inference(*args))


def test_missing_unexpected_or_misshaped_keys_are_refused(model):
    state = dict(model.state_dict())
    del state["encoder.after_norm.weight"]
    state["decoder.estimator.extra.weight"] = torch.zeros(1)
    state["encoder_proj.bias"] = torch.zeros(MELS + 1)
    with pytest.raises(ValueError) as refused:
        load_flow(state, tiny_config())
    message = str(refused.value)
    assert "1 missing: encoder.after_norm.weight" in message
    assert "1 unexpected: decoder.estimator.extra.weight" in message
    assert "1 wrong shape: encoder_proj.bias (9,) (want (8,))" in message


def test_full_size_layout_matches_the_official_checkpoint():
    """Every name and shape of the official CausalMaskedDiffWithXvec (cosyvoice2.yaml), no more, no fewer."""
    official = {}
    for line in KEYS.read_text().splitlines():
        name, shape = line.split(" ")
        official[name] = tuple(int(d) for d in shape.split("x"))
    with torch.device("meta"):
        ours = CosyVoice2Flow(FlowConfig())
    layout = {name: tuple(tensor.shape) for name, tensor in ours.state_dict().items()}
    assert len(official) == 1121
    assert sorted(set(official) - set(layout)) == [] and sorted(set(layout) - set(official)) == []
    assert layout == official
