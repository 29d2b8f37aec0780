"""`python -m ssd_demo train-draft`: the options, and the run that ties the steps together."""

from __future__ import annotations

import argparse
import json
import math
import time
import zlib
from dataclasses import asdict, replace
from pathlib import Path

import torch
from tqdm import tqdm

from ...engine.draft_heads import target_fingerprint
from .data import data_fingerprint, read_data
from .draft import expected_acceptance, export_draft, trainable_draft
from .generations import default_texts, ensure_generations, read_texts, spoken_chunks
from .prompts import prompt_mix
from .recipe import DRAFT_FILE, PRESETS, SUMMARY_FILE, DraftRecipe, checkpoint_target, smoke_recipe, smoke_target
from .train_loop import train
from ...errors import InputError


def recipe_from(args: argparse.Namespace) -> DraftRecipe:
    recipe = smoke_recipe() if args.smoke else DraftRecipe()
    stage = recipe.stage
    for option in ("steps", "lr", "warmup", "checkpoint_every", "max_minutes", "seed"):
        if getattr(args, option) is not None:
            stage = replace(stage, **{option: getattr(args, option)})
    recipe = replace(recipe, stage=stage)
    for option in ("batch_size", "max_new_tokens", "held_out", "zero_shot_fraction"):
        if getattr(args, option) is not None:
            recipe = replace(recipe, **{option: getattr(args, option)})
    if args.num_texts is not None:
        recipe = replace(recipe, texts=args.num_texts)
    checks = (("--steps", stage.steps, 1), ("--batch-size", recipe.batch_size, 1), ("--warmup", stage.warmup, 0),
              ("--checkpoint-every", stage.checkpoint_every, 1), ("--held-out", recipe.held_out, 1),
              ("--max-new-tokens", recipe.max_new_tokens, 0), ("--num-texts", recipe.texts, 2))
    for flag, value, least in checks:
        if value < least:
            raise InputError(f"{flag} must be at least {least}, got {value}")
    if not 0 <= recipe.zero_shot_fraction <= 1:
        raise InputError(f"--zero-shot-fraction must be from 0 to 1, got {recipe.zero_shot_fraction}")
    if not stage.lr > 0:
        raise InputError(f"--lr must be positive, got {stage.lr}")
    return recipe


PAPER_LOSS = "cross-entropy on LibriTTS"
LOSS_DETAIL = {"kl_on_target_generations": "KL(target || draft) at temperature 1 over generated positions",
               "cross_entropy_on_data": "next-token cross-entropy on the data's speech tokens and end of speech"}
DISTILLATION_DATA = ("the target's own generations (RAS, official length bounds) from the backend's prompts: "
                     "zero-shot with a voice (an earlier generation, or the default voice) or cross-lingual")


def app_default_voice(args: argparse.Namespace, target):
    """The app's default voice (`loading.default_voice`), encoded with the checkpoint's ONNX models."""
    if args.checkpoint is None:
        raise InputError("--default-voice needs --checkpoint: the voice is encoded with the checkpoint's ONNX models")
    from ...backends.cosyvoice2.frontend import PromptEncoders
    from ...backends.cosyvoice2.loading import default_voice

    return default_voice(PromptEncoders(args.checkpoint, device="cpu"), target.tokenizer)


def _check_flags(args: argparse.Namespace) -> None:
    if args.preset not in PRESETS:
        raise InputError(f"train-draft knows the preset(s) {', '.join(PRESETS)}, not {args.preset!r}")
    if args.smoke == (args.checkpoint is not None):
        raise InputError("give --checkpoint (a CosyVoice 2 folder) or --smoke (a tiny random target), "
                         "not both or neither")
    if args.data is not None and (args.texts is not None or args.default_voice):
        raise InputError("--data trains on its own utterances and prompts: leave out --texts and --default-voice")


def _training_items(args, target, recipe, out: Path, deadline: float, dtype, device, log):
    """(items, texts): the utterances to train on (from --data, or the target's own generations of the texts,
    made or resumed now; texts None with --data); None when the time ran out while generating."""
    dtype_name = str(dtype).removeprefix("torch.")
    if args.data is not None:
        items = read_data(args.data, target)
        if len(items) <= recipe.held_out:
            raise InputError(f"{args.data} has {len(items)} utterances: none to train on after holding out {recipe.held_out}")
        log(f"train-draft: {target.source['target']} target on {device}, {len(items)} utterances from {args.data} "
            f"({recipe.held_out} held out), cross-entropy, {dtype_name} training")
        return items, None
    texts = read_texts(args.texts) if args.texts is not None else default_texts(recipe.texts, recipe.stage.seed)
    if len(texts) <= recipe.held_out:
        raise InputError(f"{len(texts)} texts leave none to train on after holding out {recipe.held_out}")
    texts = spoken_chunks(texts, target.tokenize, log)
    if len(texts) <= recipe.held_out:
        raise InputError(f"{len(texts)} speakable texts leave none to train on after holding out {recipe.held_out}")
    log(f"train-draft: {target.source['target']} target ({target.model.config.num_hidden_layers} layers) on {device}, "
        f"{len(texts)} texts ({recipe.held_out} held out), {dtype_name} training")
    voice = app_default_voice(args, target) if args.default_voice else None
    items = ensure_generations(target, texts, out, recipe.stage.seed, recipe.max_new_tokens, deadline, log,
                               recipe.zero_shot_fraction, voice, recipe.default_voice_share)
    return None if items is None else (items, texts)


def _run_key(args, target, recipe, items, texts, loss: str) -> dict:
    """What a checkpoint was trained on: a resumed run must match it."""
    key = {"target": target_fingerprint(target.model), "max_new_tokens": recipe.max_new_tokens,
           "held_out": recipe.held_out, "seed": recipe.stage.seed, "bottom": recipe.bottom, "top": recipe.top,
           "loss": loss, "prompts": prompt_mix(items)}
    if args.data is None:
        return key | {"texts": zlib.crc32("\n".join(texts).encode()), "zero_shot_fraction": recipe.zero_shot_fraction,
                      "default_voice": args.default_voice}
    return key | {"data": data_fingerprint(args.data)}


def run(args: argparse.Namespace) -> int:
    _check_flags(args)
    recipe = recipe_from(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    deadline = started + recipe.stage.max_minutes * 60 if recipe.stage.max_minutes else math.inf
    out: Path = args.out or Path("runs/cosyvoice2-draft-smoke" if args.smoke else "runs/cosyvoice2-draft")
    out.mkdir(parents=True, exist_ok=True)
    log = tqdm.write

    target = smoke_target() if args.smoke else checkpoint_target(args.checkpoint, str(device))
    target.model.to(device).eval().requires_grad_(False)
    found = _training_items(args, target, recipe, out, deadline, dtype, device, log)
    if found is None:
        return 0
    items, texts = found
    train_items, held_out = items[: -recipe.held_out], items[-recipe.held_out:]
    loss = "kl_on_target_generations" if args.data is None else "cross_entropy_on_data"

    draft, names = trainable_draft(target.model, recipe.bottom, recipe.top)
    before = expected_acceptance(draft, target.model, target.layout, held_out, recipe.batch_size)
    log(f"train-draft: held-out acceptance before training {before['ras']:.3f} (RAS), "
        f"{before['softmax']:.3f} (softmax)")
    key = _run_key(args, target, recipe, items, texts, loss)
    summary = train(draft, names, target.model, train_items, recipe, dtype, out, key, deadline, log, loss)
    after = expected_acceptance(draft, target.model, target.layout, held_out, recipe.batch_size)
    log(f"train-draft: held-out acceptance after {summary['steps']} steps {after['ras']:.3f} (RAS), "
        f"{after['softmax']:.3f} (softmax); final loss {summary['final_loss']}")

    export_draft(draft, names, out / DRAFT_FILE)
    stage_settings = {k: v for k, v in asdict(recipe.stage).items() if k != "batch_tokens"}  # batches count sequences
    report = {
        "preset": args.preset, **target.source,
        "draft": {"bottom": recipe.bottom, "top": recipe.top, "trained": names,
                  "trained_parameters": sum(p.numel() for n, p in draft.named_parameters() if n in names)},
        "recipe": {**asdict(recipe), "stage": stage_settings, "dtype": str(dtype).removeprefix("torch."), "device": device.type,
                   "loss": loss, "loss_detail": LOSS_DETAIL[loss], "paper_loss": PAPER_LOSS,
                   "data": str(args.data) if args.data else DISTILLATION_DATA},
        "prompts": {"builder": "CosyVoice2Backend.prompt_ids",
                    "zero_shot_fraction": None if args.data else recipe.zero_shot_fraction,
                    "default_voice": args.default_voice, "train": prompt_mix(train_items),
                    "held_out": prompt_mix(held_out)},
        "texts": len(texts) if texts is not None else None, "train_generations": len(train_items),
        "held_out_generations": len(held_out), "train_speech_tokens": sum(len(i["generated"]) for i in train_items),
        "training": summary,
        "acceptance": {"before": before, "after": after},
        "run_seconds": round(time.perf_counter() - started, 1),
    }
    (out / SUMMARY_FILE).write_text(json.dumps(report, indent=1) + "\n")
    log(f"train-draft: draft written to {out / DRAFT_FILE}")
    return 0
