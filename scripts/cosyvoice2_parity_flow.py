"""Developer check: our CosyVoice 2 flow model against the official one, same weights, same inputs.

    python -m scripts.cosyvoice2_parity_flow --official CosyVoice/ --matcha Matcha-TTS/ \
        [--write-keys tests/data/cosyvoice2_flow_keys.txt]

It imports the official `CausalMaskedDiffWithXvec` with its UpsampleConformerEncoder and
CausalConditionalCFM / CausalConditionalDecoder from the two checkouts, built with the
hyperparameters of `examples/libritts/cosyvoice2/conf/cosyvoice2.yaml` at full size and random
weights (fixed seed, every parameter perturbed so no LayerNorm or bias stays trivial), loads the same
state dict into ours strictly, runs both on the same random tokens, prompt mel and speaker vector
(non-streaming, finalize=True), and prints the largest absolute differences of the encoder output,
`mu`, and the final mel, plus each side's wall time. The first run leaves both sides on their own
fixed noise (the two noise tensors are also compared for equality); a second run puts one fresh
noise tensor into both (the official's `rand_noise`, our `noise=`), to check the injection path.

The official code needs diffusers (0.29, as CosyVoice pins it), einops and omegaconf: run this with
an interpreter that has them, never added to this project's requirements. Modules the inference
path does not use (the LLM, vocoder and CLI behind `cosyvoice.utils.class_utils`, onnxruntime,
lightning, conformer) are replaced by stand-ins in `sys.modules` for the run.

`--write-keys FILE` writes the official state dict's `name shape` lines (the test data that checks
our module's layout key for key).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import time
import types
import warnings
from pathlib import Path

import torch

#: cosyvoice2.yaml's streaming chunk (tokens; only used when streaming) and mel frames per token.
CHUNK_SIZE, TOKEN_MEL_RATIO = 25, 2


def _stub(name: str, **attributes) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module


def _install_stand_ins() -> None:
    """Stand-ins for imports the flow's inference path never calls."""

    class _Unused:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("stand-in: not used by the flow's inference path")

    # cosyvoice.utils.onnx loads onnxruntime at import; the flow only reads two names from it.
    _stub("cosyvoice.utils.onnx", SpeechTokenExtractor=_Unused, online_feature=False, onnx_path=None)
    # matcha.utils/__init__ pulls hydra, lightning and rich; the CFM base class only wants a logger.
    _stub("matcha.utils", __path__=[])
    _stub("matcha.utils.pylogger", get_pylogger=logging.getLogger)
    if importlib.util.find_spec("conformer") is None:  # Matcha's ConformerWrapper, unused by CosyVoice
        _stub("conformer", ConformerBlock=torch.nn.Module)
    # class_utils imports the LLM, vocoder and CLI models just to build its registries; rebuild the
    # registries the encoder reads from the real transformer modules.
    from cosyvoice.transformer.attention import MultiHeadedAttention, RelPositionMultiHeadedAttention
    from cosyvoice.transformer.embedding import EspnetRelPositionalEncoding, PositionalEncoding
    from cosyvoice.transformer.subsampling import LinearNoSubsampling

    _stub("cosyvoice.utils.class_utils",
          COSYVOICE_ACTIVATION_CLASSES={"swish": torch.nn.SiLU, "relu": torch.nn.ReLU, "gelu": torch.nn.GELU},
          COSYVOICE_SUBSAMPLE_CLASSES={"linear": LinearNoSubsampling},
          COSYVOICE_EMB_CLASSES={"rel_pos_espnet": EspnetRelPositionalEncoding, "abs_pos": PositionalEncoding},
          COSYVOICE_ATTENTION_CLASSES={"selfattn": MultiHeadedAttention,
                                       "rel_selfattn": RelPositionMultiHeadedAttention})


def build_official(official: Path, matcha: Path) -> torch.nn.Module:
    """The official CausalMaskedDiffWithXvec with cosyvoice2.yaml's hyperparameters."""
    sys.path[:0] = [str(official), str(matcha)]
    _install_stand_ins()
    warnings.filterwarnings("ignore", category=FutureWarning, module="diffusers")  # LoRACompatibleLinear
    from cosyvoice.flow.decoder import CausalConditionalDecoder
    from cosyvoice.flow.flow import CausalMaskedDiffWithXvec
    from cosyvoice.flow.flow_matching import CausalConditionalCFM
    from cosyvoice.transformer.upsample_encoder import UpsampleConformerEncoder
    from omegaconf import DictConfig

    encoder = UpsampleConformerEncoder(
        input_size=512, output_size=512, attention_heads=8, linear_units=2048, num_blocks=6, dropout_rate=0.1,
        positional_dropout_rate=0.1, attention_dropout_rate=0.1, normalize_before=True, input_layer="linear",
        pos_enc_layer_type="rel_pos_espnet", selfattention_layer_type="rel_selfattn", use_cnn_module=False,
        macaron_style=False, static_chunk_size=CHUNK_SIZE)
    estimator = CausalConditionalDecoder(
        in_channels=320, out_channels=80, channels=[256], dropout=0.0, attention_head_dim=64, n_blocks=4,
        num_mid_blocks=12, num_heads=8, act_fn="gelu", static_chunk_size=CHUNK_SIZE * TOKEN_MEL_RATIO,
        num_decoding_left_chunks=-1)
    cfm_params = DictConfig({"sigma_min": 1e-06, "solver": "euler", "t_scheduler": "cosine",
                             "training_cfg_rate": 0.2, "inference_cfg_rate": 0.7, "reg_loss_type": "l1"})
    decoder = CausalConditionalCFM(in_channels=240, n_spks=1, spk_emb_dim=80, cfm_params=cfm_params,
                                   estimator=estimator)
    return CausalMaskedDiffWithXvec(
        input_size=512, output_size=80, spk_embed_dim=192, output_type="mel", vocab_size=6561,
        input_frame_rate=25, only_mask_loss=True, token_mel_ratio=TOKEN_MEL_RATIO, pre_lookahead_len=3,
        encoder=encoder, decoder=decoder).eval()


def write_keys(state: dict[str, torch.Tensor], path: Path) -> None:
    lines = [f"{name} {'x'.join(str(d) for d in tensor.shape)}" for name, tensor in state.items()]
    path.write_text("\n".join(lines) + "\n")


def _capture(module: torch.nn.Module, store: dict, key: str):
    def hook(_module, _inputs, output):
        store[key] = (output[0] if isinstance(output, tuple) else output).detach().clone()
    return module.register_forward_hook(hook)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True, help="CosyVoice checkout (its repository root)")
    parser.add_argument("--matcha", type=Path, required=True, help="Matcha-TTS checkout (its repository root)")
    parser.add_argument("--write-keys", type=Path, help="write the official state dict's `name shape` lines here")
    parser.add_argument("--tokens", type=int, default=40, help="generated tokens")
    parser.add_argument("--prompt-tokens", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from ssd_demo.backends.cosyvoice2.flow import load_flow

    torch.manual_seed(args.seed)  # the official init draws from the global generator (and reseeds it with 0)
    official = build_official(args.official.resolve(), args.matcha.resolve())
    torch.manual_seed(args.seed)
    with torch.no_grad():
        for parameter in official.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter))
    state = official.state_dict()
    if args.write_keys:
        write_keys(state, args.write_keys)
        print(f"wrote {len(state)} keys to {args.write_keys}")
    ours = load_flow({name: tensor.clone() for name, tensor in state.items()})
    print(f"strict load: ok ({len(state)} tensors, {sum(t.numel() for t in state.values()) / 1e6:.1f} M values)")
    noise_equal = torch.equal(official.decoder.rand_noise, ours.decoder.fixed_noise())
    print(f"fixed noise [1, 80, 15000] equal to the official: {noise_equal}")

    generator = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, 6561, (1, args.tokens), generator=generator, dtype=torch.int32)
    prompt = torch.randint(0, 6561, (1, args.prompt_tokens), generator=generator, dtype=torch.int32)
    prompt_mel = torch.randn(1, TOKEN_MEL_RATIO * args.prompt_tokens, 80, generator=generator)
    speaker = torch.randn(1, 192, generator=generator)

    def official_mel() -> torch.Tensor:
        mel, _ = official.inference(
            token=tokens, token_len=torch.tensor([tokens.shape[1]], dtype=torch.int32), prompt_token=prompt,
            prompt_token_len=torch.tensor([prompt.shape[1]], dtype=torch.int32), prompt_feat=prompt_mel,
            prompt_feat_len=torch.tensor([prompt_mel.shape[1]], dtype=torch.int32), embedding=speaker,
            streaming=False, finalize=True)
        return mel

    seen: dict[str, torch.Tensor] = {}
    hooks = [_capture(official.encoder, seen, "official encoder"), _capture(official.encoder_proj, seen, "official mu"),
             _capture(ours.encoder, seen, "our encoder"), _capture(ours.encoder_proj, seen, "our mu")]
    start = time.perf_counter()
    reference = official_mel()
    official_s = time.perf_counter() - start
    start = time.perf_counter()
    mel = ours.inference(tokens, prompt, prompt_mel, speaker)
    ours_s = time.perf_counter() - start
    for hook in hooks:
        hook.remove()

    frames = TOKEN_MEL_RATIO * (args.tokens + args.prompt_tokens)
    fresh = torch.randn(1, 80, frames, generator=generator)
    official.decoder.rand_noise = fresh
    injected = ours.inference(tokens, prompt, prompt_mel, speaker, noise=fresh)
    injected_diff = (official_mel() - injected).abs().max().item()

    encoder_diff = (seen["official encoder"] - seen["our encoder"]).abs().max().item()
    mu_diff = (seen["official mu"] - seen["our mu"]).abs().max().item()
    mel_diff = (reference - mel).abs().max().item()
    print(f"tokens {args.tokens} + prompt {args.prompt_tokens}: mel {list(mel.shape)} "
          f"(official {list(reference.shape)}), |mel| max {reference.abs().max().item():.3f}")
    print(f"max abs diff  encoder output: {encoder_diff:.3e}   mu: {mu_diff:.3e}   mel: {mel_diff:.3e}   "
          f"mel with injected noise: {injected_diff:.3e}")
    print(f"wall time of one inference ({args.threads} thread(s)): official {official_s:.2f} s, ours {ours_s:.2f} s")
    passed = noise_equal and reference.shape == mel.shape and max(encoder_diff, mel_diff, injected_diff) <= 1e-4
    print("PARITY OK" if passed else "PARITY FAILED (bar: 1e-4)")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
