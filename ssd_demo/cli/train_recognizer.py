"""`python -m ssd_demo train-recognizer`: its flags (the recipe is ssd_demo.training.recognizer)."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..training.recognizer import DEFAULT_CODEC, run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("runs/recognizer"), help="work directory")
    parser.add_argument("--export", type=Path, default=None, help="where to write the recognizer (default: OUT/export)")
    parser.add_argument("--smoke", action="store_true", help="tiny data and model, a few steps (seconds)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--utterances", type=int, default=None)
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--codec", type=Path, default=DEFAULT_CODEC, help="codec folder for the round-trip clips")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")


def main(args: argparse.Namespace) -> int:
    return run(args)
