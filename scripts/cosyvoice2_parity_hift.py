"""Check our HiFT vocoder against the reference implementation: same weights, mel and noise, same audio.

    python -m scripts.cosyvoice2_parity_hift --official PATH [--matcha PATH] [--write-keys FILE]

PATH is a checkout of the official CosyVoice repository; its `cosyvoice` package is imported from
there (the vocoder needs only torch, numpy and scipy; `--matcha` puts a Matcha-TTS checkout on the
path too, should a version of it need one). The reference is built at full size with random weights
from a fixed seed, and its state dict is loaded into ours through `load_hift`, so this also checks
that the released key layout loads strictly. Both run on the same random mel with the same noise:
the reference draws its noise from torch's global generator, ours from a `torch.Generator` seeded
alike, and both draw the same tensors in the same order.

Random weights predict f0 near 0 Hz, all unvoiced, which would leave the sines untested, so the
f0 read-out is rescaled to give f0 of about `--f0-mean` +- `--f0-std` Hz on the test mel: a mix of
voiced and unvoiced frames (and of signs, for the read-out's abs). The printed fraction of clamped
samples says how much of the waveform the comparison really sees.
`--write-keys` writes the reference's parameter names and shapes, the test data for the layout test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ssd_demo.backends.cosyvoice2.hift import HiFTConfig, load_hift

TOLERANCE = 1e-4  # max abs difference of the waveform


def import_reference(official: Path, matcha: Path | None):
    """The reference generator and f0 predictor classes, imported from a checkout."""
    for path in (matcha, official):
        if path is not None:
            sys.path.insert(0, str(path.resolve()))
    try:
        from cosyvoice.hifigan.f0_predictor import ConvRNNF0Predictor
        from cosyvoice.hifigan.generator import HiFTGenerator
    except ImportError as error:
        raise SystemExit(f"cannot import the reference vocoder from {official}: {error}") from error
    return HiFTGenerator, ConvRNNF0Predictor


def build_reference(generator_cls, f0_cls, config: HiFTConfig) -> torch.nn.Module:
    """The reference module with the hyperparameters of `config` (its constructor's own argument names)."""
    return generator_cls(
        in_channels=config.in_channels,
        base_channels=config.base_channels,
        nb_harmonics=config.nb_harmonics,
        sampling_rate=config.sampling_rate,
        nsf_alpha=config.nsf_alpha,
        nsf_sigma=config.nsf_sigma,
        nsf_voiced_threshold=config.nsf_voiced_threshold,
        upsample_rates=list(config.upsample_rates),
        upsample_kernel_sizes=list(config.upsample_kernel_sizes),
        istft_params={"n_fft": config.istft_n_fft, "hop_len": config.istft_hop},
        resblock_kernel_sizes=list(config.resblock_kernel_sizes),
        resblock_dilation_sizes=[list(d) for d in config.resblock_dilations],
        source_resblock_kernel_sizes=list(config.source_resblock_kernel_sizes),
        source_resblock_dilation_sizes=[list(d) for d in config.source_resblock_dilations],
        lrelu_slope=config.lrelu_slope,
        audio_limit=config.audio_limit,
        f0_predictor=f0_cls(num_class=config.f0_classes, in_channels=config.in_channels,
                            cond_channels=config.f0_cond_channels),
    ).eval()


def write_keys(module: torch.nn.Module, path: Path) -> None:
    """One `name shape` line per tensor of the state dict, shape as comma-separated sizes."""
    lines = [f"{name} {','.join(str(n) for n in tensor.shape)}" for name, tensor in module.state_dict().items()]
    path.write_text("# HiFT (CosyVoice 2) state dict of the reference implementation: name shape\n"
                    + "\n".join(lines) + "\n")


@torch.no_grad()
def rescale_f0(reference: torch.nn.Module, mel: torch.Tensor, mean: float, std: float) -> None:
    """Scale and shift the f0 read-out so that, before its abs, it has this mean and spread on `mel`."""
    predictor = reference.f0_predictor
    raw = predictor.classifier(predictor.condnet(mel).transpose(1, 2)).squeeze(-1)  # [1, N], signed
    spread = raw.std(correction=0).item()
    scale = std / spread if spread > 0 else 1.0  # a single frame has no spread: shift only
    predictor.classifier.weight.mul_(scale)
    predictor.classifier.bias.mul_(scale).add_(mean - raw.mean() * scale)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        raise SystemExit(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    return (a.double() - b.double()).abs().max().item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True, help="checkout of the official CosyVoice repository")
    parser.add_argument("--matcha", type=Path, default=None, help="checkout of Matcha-TTS, if the reference needs it")
    parser.add_argument("--frames", type=int, default=100, help="mel frames (480 samples each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--f0-mean", type=float, default=100.0, help="f0 read-out rescaled to this mean (Hz)")
    parser.add_argument("--f0-std", type=float, default=100.0,
                        help="... and this spread over the test mel (Hz); 0 keeps the random read-out as it is")
    parser.add_argument("--source-phase", choices=("frame", "sample"), default="frame",
                        help="'sample' checks the per-sample phase path (the reference takes it at 22050 Hz)")
    parser.add_argument("--write-keys", type=Path, default=None, help="write the reference's state-dict layout here")
    args = parser.parse_args(argv)

    config = HiFTConfig(source_phase=args.source_phase,
                        sampling_rate=22050 if args.source_phase == "sample" else HiFTConfig.sampling_rate)
    generator_cls, f0_cls = import_reference(args.official, args.matcha)
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    reference = build_reference(generator_cls, f0_cls, config)
    mel = torch.randn(1, config.in_channels, args.frames, generator=torch.Generator().manual_seed(args.seed + 1))
    if args.f0_std > 0:
        rescale_f0(reference, mel, args.f0_mean, args.f0_std)
    state = reference.state_dict()
    print(f"reference: {type(reference.m_source.l_sin_gen).__name__} excitation, {len(state)} tensors, "
          f"{sum(t.numel() for t in state.values()):,} parameters, built in {time.perf_counter() - started:.1f} s")
    if args.write_keys is not None:
        write_keys(reference, args.write_keys)
        print(f"wrote {len(state)} keys to {args.write_keys}")

    ours = load_hift(state, config)  # strict: the reference's own layout must load as it is
    noise_seed = args.seed + 2

    with torch.inference_mode():
        torch.manual_seed(noise_seed)
        started = time.perf_counter()
        ref_wave, ref_source = reference.inference(mel)
        ref_seconds = time.perf_counter() - started
        ref_f0 = reference.f0_predictor(mel)

        started = time.perf_counter()
        out = ours(mel, generator=torch.Generator().manual_seed(noise_seed))
        our_seconds = time.perf_counter() - started

        # Streaming call: the first 10 frames' excitation given as a cache, the rest drawn afresh.
        cache = ref_source[:, :, :10 * config.hop_length]
        torch.manual_seed(noise_seed + 1)
        ref_cached, _ = reference.inference(mel, cache_source=cache)
        our_cached, _ = ours.inference(mel, cache, generator=torch.Generator().manual_seed(noise_seed + 1))

    limit = config.audio_limit
    voiced = (ref_f0 > config.nsf_voiced_threshold).float().mean().item()
    clamped = (ref_wave.abs() >= limit).float().mean().item()
    wave_diff = max_diff(ref_wave, out.waveform)
    cached_diff = max_diff(ref_cached, our_cached)
    print(f"mel {tuple(mel.shape)} -> waveform {tuple(out.waveform.shape)}; f0 {ref_f0.min().item():.1f}.."
          f"{ref_f0.max().item():.1f} Hz, {voiced:.0%} of frames voiced; {clamped:.2%} of samples at +-{limit}; "
          f"waveform std {ref_wave.std().item():.3f}")
    print(f"max abs diff  f0 {max_diff(ref_f0, out.f0):.3g} Hz  excitation {max_diff(ref_source, out.source):.3g}  "
          f"waveform {wave_diff:.3g}  waveform with cache_source {cached_diff:.3g}  (bar {TOLERANCE:g})")
    print(f"time  reference {ref_seconds:.2f} s  ours {our_seconds:.2f} s")
    passed = wave_diff <= TOLERANCE and cached_diff <= TOLERANCE
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
