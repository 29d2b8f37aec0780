"""Step 2: the trainable draft, its distillation loss, the acceptance it would get, and its export.

The draft shares the target's tensors except the ones it trains (the bottom layers and the output layer),
so that an exported draft holds only those and the loader takes the rest from the target.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ...backends.cosyvoice2.llm import SpeechVocabLayout, build_speech_lm, layer_draft, materialise
from .generations import official_sampling


def trainable_names(draft, bottom: int) -> list[str]:
    """The paper's trained tensors: the bottom `bottom` layers and the output layer (weight and bias)."""
    prefixes = ("lm_head.", *(f"model.layers.{i}." for i in range(bottom)))
    return [name for name, _ in draft.named_parameters() if name.startswith(prefixes)]


def trainable_draft(target_model, bottom: int, top: int):
    """`layer_draft(target, bottom, top)` with its own copies of the tensors it trains (the rest stay the
    target's, frozen): (draft, names of the trained tensors)."""
    shared = layer_draft(target_model, bottom, top)
    names = trainable_names(shared, bottom)
    state = shared.state_dict()
    for name in names:
        state[name] = state[name].clone()
    draft = materialise(build_speech_lm(shared.config, device="meta"), state, target_model.device)
    for name, parameter in draft.named_parameters():
        parameter.requires_grad_(name in names)
    return draft, names


def collate(examples: list[dict], device) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask, right-padded, and `predicts`: the positions whose output is a generated token."""
    sequences = [e["prompt"] + e["generated"] for e in examples]
    width = max(len(s) for s in sequences)
    input_ids = torch.zeros((len(examples), width), dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    predicts = torch.zeros((len(examples), width), dtype=torch.bool)
    for row, (example, sequence) in enumerate(zip(examples, sequences)):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        mask[row, : len(sequence)] = 1
        start = len(example["prompt"])
        predicts[row, start - 1: len(sequence) - 1] = True
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device), "predicts": predicts.to(device)}


def _logits(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def distillation_kl(draft, target_model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean over generated positions of KL(target || draft), both at temperature 1."""
    with torch.no_grad():
        teacher = F.log_softmax(_logits(target_model, batch)[batch["predicts"]].float(), dim=-1)
    student = F.log_softmax(_logits(draft, batch)[batch["predicts"]].float(), dim=-1)
    return F.kl_div(student, teacher, log_target=True, reduction="batchmean")


def next_token_cross_entropy(draft, target_model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean over the speech positions of the draft's cross-entropy on the next token (the paper's loss, on
    provided data; the target is not used)."""
    predicts = batch["predicts"][:, :-1]  # the output at position i predicts the token at i + 1
    logits = _logits(draft, batch)[:, :-1][predicts].float()
    return F.cross_entropy(logits, batch["input_ids"][:, 1:][predicts])


#: The losses `train` can minimise, by the name draft.json records.
LOSSES = {"kl_on_target_generations": distillation_kl, "cross_entropy_on_data": next_token_cross_entropy}


@torch.no_grad()
def expected_acceptance(draft, target_model, layout: SpeechVocabLayout, examples: list[dict], batch_size: int) -> dict:
    """Per generated position, the mean of sum_x min(p_target(x), p_draft(x)) (exact speculative sampling's
    acceptance probability) under RAS with its prefix ("ras") and at temperature 1 ("softmax"), and the
    mean KL(target || draft) at temperature 1; in the models' own precision (no autocast)."""
    totals = {"ras": 0.0, "softmax": 0.0, "kl": 0.0}
    positions = 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start: start + batch_size]
        batch = collate(chunk, target_model.device)
        target_logits, draft_logits = _logits(target_model, batch).float(), _logits(draft, batch).float()
        for row, example in enumerate(chunk):
            first, n = len(example["prompt"]) - 1, len(example["generated"])
            t, d = target_logits[row, first: first + n], draft_logits[row, first: first + n]
            pt, pd = torch.softmax(t, dim=-1), torch.softmax(d, dim=-1)
            totals["softmax"] += float(torch.minimum(pt, pd).sum())
            totals["kl"] += float(F.kl_div(F.log_softmax(d, -1), F.log_softmax(t, -1), log_target=True,
                                           reduction="sum"))
            ras = official_sampling(layout, example["text_count"])
            prefixes = [example["generated"][:i] for i in range(n)]
            totals["ras"] += float(torch.minimum(ras(t, prefixes), ras(d, prefixes)).sum())
            positions += n
    return {name: round(value / max(positions, 1), 4) for name, value in totals.items()} | {"positions": positions}


def export_draft(draft, trained: list[str], path: Path) -> None:
    """The trained tensors only (bottom layers and head: about 150 MB for the real draft instead of 1 GB),
    float32 safetensors in the unified layout; the loader takes every other tensor from the target."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().to("cpu", torch.float32).contiguous()
             for name, tensor in draft.state_dict().items() if name in trained}
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp), metadata={"format": "pt", "draft": "cosyvoice2 layer draft"})
    tmp.replace(path)


def load_draft_state(path: str | Path) -> dict[str, torch.Tensor]:
    """An exported draft's trained tensors, for `load_cosyvoice2(..., draft_state=...)`."""
    from safetensors.torch import load_file

    return load_file(str(path))
