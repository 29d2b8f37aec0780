"""Developer check: our unified speech LM against the official `Qwen2LM` on shared random weights.

    python -m scripts.cosyvoice2_parity_llm --official PATH/TO/CosyVoice [--layers 24]

builds the official module from a checkout of the official repository (nothing of it is imported by
the package), gives it random weights in the real shapes (Qwen2.5-0.5B backbone, 6,564-row speech
table and decoder), writes them as an `llm.pt` next to a `CosyVoice-BlankEN/config.json`, loads that
folder with our strict loader, and compares the log-probabilities both compute over a prompt (start,
text, task, prompt speech) and teacher-forced speech tokens: the official way (its `forward_one_step`
on input embeddings, a whole-prompt call then one token per call with its cache) against both of our
forwards (transformers' and the lean static-cache step). The official code needs `onnxruntime` only
for prompt-clip features, which this check does not use, so that import is stubbed here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

from ssd_demo.engine.static_cache import StaticCacheLM
from ssd_demo.backends.cosyvoice2.llm import REAL_BACKBONE, SpeechVocabLayout, load_speech_lm


def official_speech_lm(checkout: Path, backbone_folder: Path):
    """The official Qwen2LM over a backbone folder, from the checkout (its onnx helper stubbed)."""
    sys.path.insert(0, str(checkout))
    stub = types.ModuleType("cosyvoice.utils.onnx")
    stub.SpeechTokenExtractor, stub.online_feature, stub.onnx_path = None, False, None
    sys.modules["cosyvoice.utils.onnx"] = stub
    from cosyvoice.llm.llm import Qwen2Encoder, Qwen2LM  # noqa: E402  (the official code)
    from cosyvoice.utils.common import ras_sampling

    return Qwen2LM(896, 896, 6561, Qwen2Encoder(str(backbone_folder)), ras_sampling).eval()


def official_log_probs(official, text: list[int], prompt_speech: list[int], forced: list[int]) -> torch.Tensor:
    """The official call path: the prompt's embeddings in one call, then each speech token's embedding
    with the cache, log-softmax of the decoder. [len(forced) + 1, 6564]."""
    sos, task = official.llm_embedding.weight
    text_emb = official.llm.model.model.embed_tokens(torch.tensor([text]))
    speech_emb = official.speech_embedding(torch.tensor([prompt_speech]))
    lm_input = torch.cat([sos.view(1, 1, -1), text_emb, task.view(1, 1, -1), speech_emb], dim=1)
    rows, cache = [], None
    for token in [None, *forced]:
        if token is not None:
            lm_input = official.speech_embedding.weight[token].view(1, 1, -1)
            total = cache.get_seq_length() + 1
        else:
            total = lm_input.shape[1]
        masks = torch.tril(torch.ones((1, total, total), dtype=torch.bool))
        hidden, cache = official.llm.forward_one_step(lm_input, masks=masks, cache=cache)
        rows.append(official.llm_decoder(hidden[:, -1]).log_softmax(dim=-1)[0])
    return torch.stack(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True, help="a checkout of the official CosyVoice repository")
    parser.add_argument("--layers", type=int, default=REAL_BACKBONE["num_hidden_layers"])
    parser.add_argument("--text-tokens", type=int, default=24)
    parser.add_argument("--prompt-speech", type=int, default=50)
    parser.add_argument("--forced", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(args.seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        backbone = Qwen2Config(**{**REAL_BACKBONE, "num_hidden_layers": args.layers})
        Qwen2ForCausalLM(backbone).save_pretrained(folder / "CosyVoice-BlankEN")
        official = official_speech_lm(args.official, folder / "CosyVoice-BlankEN")
        with torch.no_grad():  # the official module's own tables and decoder are random too (biases included)
            for module in (official.llm_embedding, official.speech_embedding, official.llm_decoder):
                for parameter in module.parameters():
                    parameter.normal_(0, 0.02)
        torch.save(official.state_dict(), folder / "llm.pt")
        (folder / "CosyVoice-BlankEN" / "config.json").write_text(json.dumps(backbone.to_dict(), default=str))
        ours = load_speech_lm(folder)
        layout = SpeechVocabLayout(text_rows=backbone.vocab_size)
        print(f"models ready in {time.perf_counter() - started:.0f} s ({args.layers} layers)")

        text = torch.randint(0, 151643, (args.text_tokens,)).tolist()
        prompt_speech = torch.randint(0, 6561, (args.prompt_speech,)).tolist()
        forced = torch.randint(0, 6561, (args.forced,)).tolist()
        with torch.inference_mode():
            expected = official_log_probs(official, text, prompt_speech, forced)
            ids = layout.prompt_ids(text, prompt_speech) + forced
            start = len(ids) - args.forced - 1
            whole = ours(input_ids=torch.tensor([ids])).logits[0, start:].log_softmax(dim=-1)
            lean = StaticCacheLM(ours, capacity=len(ids))
            stepped = [lean.forward(ids[: start + 1], last_only=True)]
            stepped += [lean.forward([token]) for token in forced]
            stepped = torch.cat(stepped).log_softmax(dim=-1)
    for name, got in (("transformers forward", whole), ("lean static-cache step", stepped)):
        print(f"{name}: max |log p - official log p| = {(got - expected).abs().max().item():.2e} "
              f"over {expected.shape[0]} positions x {expected.shape[1]} ids; "
              f"same argmax at {int((got.argmax(-1) == expected.argmax(-1)).sum())}/{expected.shape[0]}")
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
