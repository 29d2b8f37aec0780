"""CosyVoice 2's HiFT vocoder: lengths, limits, reproducible noise, strict loading, the released key layout.

A tiny config with random weights keeps these fast; the full-size layout is checked on the meta
device against the reference's state dict (tests/data/cosyvoice2_hift_keys.txt, written by
`parity_hift --write-keys`). Audio parity with the reference is `parity_hift`'s job.
"""

from support.paths import TEST_DATA

import pytest
import torch

from ssd_demo.backends.cosyvoice2.hift import HiFTConfig, HiFTVocoder, SourceNoise, load_hift

KEYS_FILE = TEST_DATA / "cosyvoice2_hift_keys.txt"
TINY = HiFTConfig(base_channels=16, f0_cond_channels=8)


def _tiny(seed: int = 0) -> HiFTVocoder:
    torch.manual_seed(seed)
    return HiFTVocoder(TINY).eval()


def _mel(frames: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(1, TINY.in_channels, frames, generator=torch.Generator().manual_seed(seed))


def _run(model: HiFTVocoder, mel: torch.Tensor, seed: int = 0, **kwargs) -> torch.Tensor:
    waveform, _ = model.inference(mel, generator=torch.Generator().manual_seed(seed), **kwargs)
    return waveform


@pytest.mark.parametrize("frames", [1, 7])
def test_each_mel_frame_gives_480_samples(frames):
    out = _tiny()(_mel(frames), generator=torch.Generator().manual_seed(0))
    assert TINY.hop_length == 480
    assert out.waveform.shape == (1, frames * 480)
    assert out.source.shape == (1, 1, frames * 480)
    assert out.f0.shape == (1, frames) and bool((out.f0 >= 0).all())


def test_waveform_is_finite_and_clamped_to_the_audio_limit():
    model = _tiny()
    waveform = _run(model, _mel(5))
    assert torch.isfinite(waveform).all() and waveform.abs().max() <= TINY.audio_limit
    with torch.no_grad():
        model.conv_post.bias[:TINY.n_bins] += 10.0  # every magnitude far past the cap: loud, clamped audio
    loud = _run(model, _mel(5))
    assert torch.isfinite(loud).all()
    assert loud.abs().max() == pytest.approx(TINY.audio_limit)


def test_same_noise_same_audio_and_other_noise_other_audio():
    model, mel = _tiny(), _mel(6)
    first = _run(model, mel, seed=3)
    assert torch.equal(first, _run(model, mel, seed=3))
    noise = SourceNoise.draw(1, TINY.n_sines, 6 * 480, generator=torch.Generator().manual_seed(3))
    explicit, _ = model.inference(mel, noise=noise)
    assert torch.equal(first, explicit)  # a generator is the same as the noise it draws
    assert not torch.equal(first, _run(model, mel, seed=4))
    with pytest.raises(ValueError, match="noise.additive has shape"):
        model.inference(mel[:, :, :5], noise=noise)


def test_cache_source_replaces_the_start_of_the_excitation():
    model, mel = _tiny(), _mel(4)
    cache = torch.full((1, 1, 480), 0.25)
    _, source = model.inference(mel, cache, generator=torch.Generator().manual_seed(0))
    _, fresh = model.inference(mel, generator=torch.Generator().manual_seed(0))
    assert torch.equal(source[:, :, :480], cache)
    assert torch.equal(source[:, :, 480:], fresh[:, :, 480:])


def test_a_state_dict_round_trips_strictly(tmp_path):
    model, mel = _tiny(seed=5), _mel(3)
    expected = _run(model, mel)
    again = load_hift(model.state_dict(), TINY)
    assert not again.training and torch.equal(_run(again, mel), expected)
    # A HiFi-GAN training checkpoint nests the generator's keys under `generator.`.
    path = tmp_path / "hift.pt"
    torch.save({f"generator.{k}": v for k, v in model.state_dict().items()}, path)
    assert torch.equal(_run(load_hift(path, TINY), mel), expected)


def test_weight_norm_saved_by_the_older_api_loads_too():
    model, mel = _tiny(seed=6), _mel(3)
    legacy = {k.replace(".parametrizations.weight.original0", ".weight_g")
               .replace(".parametrizations.weight.original1", ".weight_v"): v
              for k, v in model.state_dict().items()}
    assert any(k.endswith(".weight_g") for k in legacy)
    assert torch.equal(_run(load_hift(legacy, TINY), mel), _run(model, mel))


def test_missing_unexpected_and_misshapen_keys_are_refused_by_name():
    state = _tiny().state_dict()
    missing = {k: v for k, v in state.items() if k != "conv_pre.bias"}
    with pytest.raises(ValueError, match=r"1 missing: conv_pre\.bias"):
        load_hift(missing, TINY)
    with pytest.raises(ValueError, match=r"1 unexpected: extra\.weight"):
        load_hift({**state, "extra.weight": torch.zeros(1)}, TINY)
    with pytest.raises(ValueError, match=r"with another shape: m_source\.l_linear\.weight"):
        load_hift({**state, "m_source.l_linear.weight": torch.zeros(1, 3)}, TINY)
    with pytest.raises(ValueError, match=r"323 with another shape: conv_pre\.bias \(file \(16,\), model \(512,\)\)"
                       r".*, and 318 more$"):
        load_hift(state)  # tiny weights into the full-size config: long lists are cut short


def test_full_size_layout_matches_the_released_state_dict():
    with torch.device("meta"):
        model = HiFTVocoder(HiFTConfig())
    ours = {name: ",".join(str(n) for n in tensor.shape) for name, tensor in model.state_dict().items()}
    lines = [line.split() for line in KEYS_FILE.read_text().splitlines() if line and not line.startswith("#")]
    reference = {name: shape for name, shape in lines}
    assert len(reference) == len(lines) == 328
    assert ours == reference
    assert "f0_predictor.condnet.0.parametrizations.weight.original0" in ours


def test_inconsistent_configs_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        HiFTConfig(upsample_kernel_sizes=(16, 11))
    with pytest.raises(ValueError, match="source_phase"):
        HiFTConfig(source_phase="cumulative")
