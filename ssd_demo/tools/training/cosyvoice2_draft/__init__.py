"""`python -m ssd_demo train-draft`: train the SSD paper's layer draft for CosyVoice 2 on the target's own speech.

    python -m ssd_demo train-draft --preset cosyvoice2 --checkpoint CosyVoice2-0.5B --out runs/cosyvoice2-draft
    python -m ssd_demo train-draft --smoke --out /tmp/draft-smoke       # tiny random target, seconds (CI)

The paper's draft is the target's bottom 2 and top 6 layers; untrained, it accepts less than it could,
because the 16 layers it skips change what the top layers see. Training it needs no speech data: the
target itself says every sentence of a text list (on-policy data), and the draft learns to predict the
target's next-token distribution on those sequences.

1. Generations: each text becomes CosyVoice 2's prompt without a voice clip ([sos, text, task], the
   official cross-lingual input, which puts no prompt speech into the LM), and the target speaks it
   with repetition-aware sampling and the official length bounds (2 to 20 speech tokens per text
   token). They are cached in OUT/generations.pt, saved as they come, so an interrupted run continues
   with the next text; each text has its own seed, so the cache is the same however often it stopped.
2. Distillation: the draft shares the target's tensors except the ones it trains, the bottom 2 layers
   and the output layer (weight and bias), as the paper does; the top layers, the final norm and the
   embedding table stay the target's. The loss is KL(target || draft) at temperature 1 at every
   generated position, the target's scores computed on the same sequences without gradients; AdamW,
   linear warmup then cosine decay (`train.lr_at`), bfloat16 autocast when asked for.
3. Checkpoints (trained tensors, optimiser, step, RNG) go to OUT/draft_checkpoint.pt every N steps and
   at the end; a new run with the same OUT resumes from it.
4. Export: OUT/draft.safetensors holds the whole draft in the unified layout
   (`loading.load_cosyvoice2(..., draft_state=load_draft_state(path))`), OUT/draft.json the recipe, the
   losses and the expected acceptance on held-out generations before and after training:
   E[sum_x min(p_target(x), p_draft(x))] per position, the probability that exact speculative sampling
   accepts a drafted token, under RAS (the distributions the decoders verify) and at temperature 1.

The steps live in their own modules: `recipe` (the recipe, OUT's files, the targets), `generations` (step 1),
`draft` (steps 2 and 4: the draft, its loss, its acceptance, its export), `train_loop` (step 3) and `cli`
(the subcommand: `add_arguments` and `main`, re-exported here for `python -m ssd_demo train-draft`).
"""

from __future__ import annotations

from .cli import add_arguments, main, recipe_from
from .draft import (
    collate,
    distillation_kl,
    expected_acceptance,
    export_draft,
    load_draft_state,
    trainable_draft,
    trainable_names,
)
from .generations import (
    default_texts,
    ensure_generations,
    generate,
    generation_config,
    official_sampling,
    read_texts,
    spoken_chunks,
)
from .recipe import (
    CHECKPOINT_FILE,
    DRAFT_FILE,
    GENERATIONS_FILE,
    PRESETS,
    SMOKE_LAYOUT,
    SUMMARY_FILE,
    DraftRecipe,
    Target,
    checkpoint_target,
    smoke_recipe,
    smoke_target,
)
from .train_loop import batch_at, train

__all__ = [
    "CHECKPOINT_FILE", "DRAFT_FILE", "GENERATIONS_FILE", "PRESETS", "SMOKE_LAYOUT", "SUMMARY_FILE", "DraftRecipe",
    "Target", "add_arguments", "batch_at", "checkpoint_target", "collate", "default_texts", "distillation_kl",
    "ensure_generations", "expected_acceptance", "export_draft", "generate", "generation_config", "load_draft_state",
    "main", "official_sampling", "read_texts", "recipe_from", "smoke_recipe", "smoke_target", "spoken_chunks",
    "train", "trainable_draft", "trainable_names",
]
