"""`python -m ssd_demo train`: its flags (the recipe is ssd_demo.training.recipe, the run ssd_demo.training.voice)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..training.recipe import STAGES, Recipe, smoke_recipe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("runs/voice"), help="work directory (data, checkpoints)")
    parser.add_argument("--smoke", action="store_true", help="tiny corpus and models, a few steps (seconds)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    parser.add_argument("--export", type=Path, default=None,
                        help="where the export stage writes the voice (default: OUT/export)")
    parser.add_argument("--target-steps", type=int, default=None)
    parser.add_argument("--draft-steps", type=int, default=None)
    parser.add_argument("--target-lr", type=float, default=None,
                        help="peak learning rate of the target stage (lower it to continue a trained target)")
    parser.add_argument("--draft-lr", type=float, default=None,
                        help="peak learning rate of the draft stages (lower it to continue trained drafts)")
    parser.add_argument("--max-minutes", type=float, default=None, help="wall-time cap per training stage")
    parser.add_argument("--corpus-size", type=int, default=None,
                        help=f"sentences to generate and render (default {Recipe.data.corpus_size}, the smoke recipe's "
                             f"{smoke_recipe().data.corpus_size}; {Recipe.data.test_size} are held out)")
    parser.add_argument("--short-utterances", type=int, default=None,
                        help=f"utterances of one to three words rendered besides the sentences (default "
                             f"{Recipe.data.short_utterances}, the smoke recipe's {smoke_recipe().data.short_utterances})")
    parser.add_argument("--symbol-codes", type=int, default=None, metavar="N",
                        help="codes relative to the phoneme being said: N centroids per phoneme symbol instead of "
                             f"one codebook of {Recipe.data.codebook_size} (a new vocabulary: train every stage anew)")
    parser.add_argument("--heads-unroll", type=int, default=None,
                        help=f"tokens the heads stage rolls the target's state forward (default {Recipe.heads_unroll})")
    parser.add_argument("--heads-inner", type=int, default=None,
                        help=f"width of each heads block's MLP (default {Recipe.heads.inner}; smaller steps faster)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="where the training stages run: cpu (default) or cuda")
    parser.add_argument("--init-from", type=Path, default=None,
                        help="a trained voice folder to start the target and the distilled draft from (same widths)")


def main(args: argparse.Namespace) -> int:
    from ..training.voice import run  # deferred (torch): --help stays quick

    return run(args)
