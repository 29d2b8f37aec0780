"""`python -m ssd_demo train-draft`: its flags (the recipe is ssd_demo.training.cosyvoice2_draft.settings, the run
ssd_demo.training.cosyvoice2_draft)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..training.cosyvoice2_draft.settings import PRESETS, DraftRecipe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    recipe = DraftRecipe()
    parser.add_argument("--preset", default="cosyvoice2", help=f"whose draft to train: {', '.join(PRESETS)}")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="the CosyVoice 2 checkpoint folder (llm.pt and CosyVoice-BlankEN/)")
    parser.add_argument("--out", type=Path, default=None,
                        help="work directory: generations, checkpoint, the exported draft (default: "
                             "runs/cosyvoice2-draft, or runs/cosyvoice2-draft-smoke with --smoke)")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny random target built in memory, a few steps (seconds)")
    parser.add_argument("--steps", type=int, default=None, help=f"training steps (default {recipe.stage.steps})")
    parser.add_argument("--lr", type=float, default=None, help=f"peak learning rate (default {recipe.stage.lr})")
    parser.add_argument("--warmup", type=int, default=None, help=f"warmup steps (default {recipe.stage.warmup})")
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"generated sequences per step (default {recipe.batch_size})")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help=f"steps between checkpoints (default {recipe.stage.checkpoint_every})")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="cap on generated tokens per text, under the official 20 per text token (default: none)")
    parser.add_argument("--texts", type=Path, default=None,
                        help="a text file, one text per line (default: built-in texts)")
    parser.add_argument("--num-texts", type=int, default=None,
                        help=f"how many built-in texts, without --texts (default {recipe.texts})")
    parser.add_argument("--zero-shot-fraction", type=float, default=None,
                        help="share of texts prompted zero-shot with a voice, as the app speaks; the rest "
                             f"cross-lingual (default {recipe.zero_shot_fraction})")
    parser.add_argument("--default-voice", action="store_true",
                        help="prompt a share of the zero-shot texts in the app's default voice (encoded with the "
                             "checkpoint's ONNX models and eSpeak NG; with --checkpoint)")
    parser.add_argument("--data", type=Path, default=None,
                        help="JSON Lines of {\"text\", \"speech_tokens\"} (optionally \"prompt_text\", "
                             "\"prompt_speech_tokens\"): train with cross-entropy on this speech instead of "
                             "distilling the target on its own generations (the paper's loss)")
    parser.add_argument("--held-out", type=int, default=None,
                        help=f"texts kept out of training to measure acceptance (default {recipe.held_out})")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help="training precision: bfloat16 autocast over float32 weights (default: bfloat16 on CUDA)")
    parser.add_argument("--device", default=None, help="cuda, cpu, ... (default: cuda when there is one)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="wall-time cap for this run (generation and training); the next run continues")
    parser.add_argument("--seed", type=int, default=None,
                        help="seeds the generations and the batch order (default 0)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")


def main(args: argparse.Namespace) -> int:
    from ..training.cosyvoice2_draft.command import run  # deferred (torch): --help stays quick

    return run(args)
