"""`python -m ssd_demo train-draft`: train the SSD paper's layer draft for CosyVoice 2 on the target's own speech.

    python -m ssd_demo train-draft --preset cosyvoice2 --checkpoint CosyVoice2-0.5B --out runs/cosyvoice2-draft
    python -m ssd_demo train-draft --smoke --out /tmp/draft-smoke       # tiny random target, seconds (CI)
    python -m ssd_demo train-draft --checkpoint CosyVoice2-0.5B --data speech.jsonl   # the paper's loss, your data

The paper's draft is the target's bottom 2 and top 6 layers; untrained, it accepts less than it could,
because the 16 layers it skips change what the top layers see. Training it needs no speech data: the
target itself says every sentence of a text list (on-policy data), and the draft learns to predict the
target's next-token distribution on those sequences.

Not the paper's loss: the paper trains with cross-entropy on LibriTTS; by default this recipe minimises
KL(target || draft) on the target's own generations (draft.json records both, `loss` and `paper_loss`).
With `--data FILE` (JSON Lines of pre-tokenized speech, `data`) it trains with next-token cross-entropy
on that speech instead, the paper's loss on whatever data the user has.

1. Generations: each text becomes the prompt the backend itself builds (`prompts`; its
   `CosyVoice2Backend.prompt_ids`). As the app always speaks zero-shot, most texts (`zero_shot_fraction`,
   0.8) are prompted with a voice, [sos, transcript + text, task, the voice's speech tokens]: an earlier
   generation of the same run (its text as the transcript, its speech tokens as the clip's; no encoders
   needed) or, with --default-voice, the app's default voice for a share of them; the rest get the
   official cross-lingual input [sos, text, task]. The target speaks each with repetition-aware sampling
   and the official length bounds (2 to 20 speech tokens per text token). They are cached in
   OUT/generations.pt, saved as they come, so an interrupted run continues with the next text; each text
   has its own seed (its voice drawn from it and the generations before it), so the cache is the same
   however often it stopped, and its key holds the prompt settings, so a cache of others is refused.
2. Distillation: the draft shares the target's tensors except the ones it trains, the bottom 2 layers
   and the output layer (weight and bias), as the paper does; the top layers, the final norm and the
   embedding table stay the target's. The loss is KL(target || draft) at temperature 1 at every
   generated position, the target's scores computed on the same sequences without gradients (with
   --data: next-token cross-entropy on the data's speech tokens, no target scores needed); AdamW,
   linear warmup then cosine decay (`train.lr_at`), bfloat16 autocast when asked for.
3. Checkpoints (trained tensors, optimiser, step, RNG) go to OUT/draft_checkpoint.pt every N steps and
   at the end; a new run with the same OUT resumes from it.
4. Export: OUT/draft.safetensors holds the whole draft in the unified layout
   (`loading.load_cosyvoice2(..., draft_state=load_draft_state(path))`), OUT/draft.json the recipe, the
   loss (and the paper's), the prompt mix, the losses and the expected acceptance on held-out generations
   (or held-out data lines) before and after training:
   E[sum_x min(p_target(x), p_draft(x))] per position, the probability that exact speculative sampling
   accepts a drafted token, under RAS (the distributions the decoders verify) and at temperature 1.

The steps live in their own modules: `recipe` (the recipe, OUT's files, the targets), `prompts` (the
backend's prompts and the voices), `generations` (step 1), `data` (--data), `draft` (steps 2 and 4: the
draft, its losses, its acceptance, its export), `train_loop` (step 3) and `command` (its `run`: the
recipe from the command's options; `python -m ssd_demo train-draft` is ssd_demo.cli.train_draft).
"""

from __future__ import annotations

# Where each name lives; imported on first use (PEP 562), so that the recipe's settings (`settings`) load without
# torch and the command's --help stays quick.
_SOURCES = {
    "data": ("read_data",),
    "draft": ("LOSSES", "collate", "distillation_kl", "expected_acceptance", "export_draft", "load_draft_state",
              "next_token_cross_entropy", "trainable_draft", "trainable_names"),
    "generations": ("default_texts", "ensure_generations", "generate", "generation_config", "official_sampling",
                    "read_texts", "spoken_chunks"),
    "prompts": ("CROSS_LINGUAL", "backend_prompt", "choose_voice", "prompt_mix", "text_ids", "voice_of"),
    "recipe": ("CHECKPOINT_FILE", "DRAFT_FILE", "GENERATIONS_FILE", "SMOKE_LAYOUT", "SUMMARY_FILE", "Target",
               "WordHashTokenizer", "checkpoint_target", "smoke_target"),
    "settings": ("PRESETS", "DraftRecipe", "smoke_recipe"),
    "command": ("recipe_from", "run"),
    "train_loop": ("batch_at", "train"),
}
_NAMES = {name: module for module, names in _SOURCES.items() for name in names}
#: The package's modules, reachable as its attributes (`cosyvoice2_draft.prompts`) as when it imported them all.
_MODULES = tuple(_SOURCES)

__all__ = [
    "CROSS_LINGUAL", "LOSSES", "backend_prompt", "choose_voice", "next_token_cross_entropy", "prompt_mix",
    "read_data", "text_ids", "voice_of", "WordHashTokenizer",
    "CHECKPOINT_FILE", "DRAFT_FILE", "GENERATIONS_FILE", "PRESETS", "SMOKE_LAYOUT", "SUMMARY_FILE", "DraftRecipe",
    "Target", "batch_at", "checkpoint_target", "collate", "default_texts", "distillation_kl",
    "ensure_generations", "expected_acceptance", "export_draft", "generate", "generation_config", "load_draft_state",
    "official_sampling", "read_texts", "recipe_from", "run", "smoke_recipe", "smoke_target", "spoken_chunks",
    "train", "trainable_draft", "trainable_names",
]


def __getattr__(name: str):
    import importlib

    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_NAMES, *_MODULES])
