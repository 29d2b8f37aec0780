"""Train the embedded voice's target and its three drafts within a time budget (developer tool; GPU or CPU).

Each stage is sized by timing a few of its steps on the device: as many steps as fit its minutes, capped at
its epochs, so the cosine schedule completes. Held-out cross-entropy every 200 steps is kept for the docs.
Usage (repository root): python scripts/train_voice_gpu.py DATASET.npz OUT_DIR BUDGET (a JSON file or string;
scripts/train_voice_gpu.json is the H200-sized one: about 9 minutes of a 15-minute lease;
scripts/train_voice_cpu.json the 2-core CPU one, with fixed step counts).
Budget keys beyond the models' shapes: minutes / epochs / steps per stage, batch_tokens, target_lr, weight_decay,
threads, max_sequence, heads_inner, unroll, init_from (a voice folder whose target, distilled draft and heads start
the new ones where shapes agree), speech_input_noise (the share of the target's input speech tokens replaced at
random, `training.train.with_noisy_speech_inputs`; its draws restart with a resumed run), neighbour_runs
({"rate", "neighbours", "codebook"}: the share of input runs of one code swapped for one of its k nearest
centroids, `training.train.with_neighbour_runs`), leading_run (the longest opening pause kept, in frames:
`training.dataset.trim_leading_run`; default the dataset's own, or `DataConfig.leading_run` for datasets made
before it existed; null keeps whole pauses). Every stage
checkpoints and resumes in OUT_DIR; the budget is kept in OUT_DIR/voice/training.json.
DATASET.npz is `training.dataset.save_dataset`'s format; OUT_DIR/voice gets float16 models + training.json,
which `scripts/assemble_voice.py` turns into a voice folder (docs/training.md).
"""
import json, os, random, sys, time
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, os.getcwd())
from ssd_demo.backends.vocab import VocabLayout
from ssd_demo.measure.reporting import cpu_name
from ssd_demo.engine.draft_heads import DraftHeads, HeadsConfig, target_fingerprint
from ssd_demo.training.heads import evaluate_heads, heads_loss
from ssd_demo.training.dataset import opening_cut, trim_leading_run
from ssd_demo.training.precision import autocast
from ssd_demo.training.voice import _warm_start_heads
from ssd_demo.training.train import (ModelSpec, StageConfig, collate, cross_entropy, distillation_kl,
    evaluate_ce, layer_subset_draft, make_batches, make_llama, to_device, train_stage, warm_start,
    with_noisy_speech_inputs, codebook_neighbours, with_neighbour_runs)
from transformers import AutoModelForCausalLM

data_path, out = Path(sys.argv[1]), Path(sys.argv[2])
budget = json.loads(Path(sys.argv[3]).read_text() if sys.argv[3].endswith(".json") else sys.argv[3])
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.set_num_threads(budget.get("threads", 2))
def sync():
    if device.type == "cuda":
        torch.cuda.synchronize()
torch.backends.cuda.matmul.allow_tf32 = True
T0 = time.time()
def log(m): print(f"[{time.time()-T0:6.0f}s] {m}", flush=True)
CURVES = {}
def stage_log(name, model, every=200):
    """train_stage's log, plus held-out cross-entropy every `every` steps (for the docs' curves)."""
    def inner(m):
        log(m)
        if " step " in m and "/" in m:
            step = int(m.split(" step ")[1].split("/")[0])
            if step % every == 0:
                ce = evaluate_ce(model, test, layout, BT)
                CURVES.setdefault(name, []).append((step, round(ce, 4)))
                log(f"{name}: held-out CE {ce:.4f} at step {step}")
    return inner
stored = np.load(data_path)
meta = json.loads(str(stored["meta"]))
layout = VocabLayout.from_dict(meta["layout"])
def rows(split, field):
    flat, off = stored[f"{split}_{field}"], stored[f"{split}_{field}_offsets"]
    return [flat[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
def split(name):
    return [{"text": str(t), "prompt": p, "speech": q} for t, p, q in zip(stored[f"{name}_text"], rows(name, "prompt"), rows(name, "speech"))]
train, test = split("train"), split("test")
LEAD = opening_cut(budget, meta["config"])
if LEAD is not None:
    for e in train + test:
        e["speech"] = trim_leading_run(e["speech"], layout, LEAD)
    log(f"opening pauses cut to at most {LEAD} frames")
MAXSEQ = budget.get("max_sequence", 1200)
train = [e for e in train if len(e["prompt"]) + len(e["speech"]) <= MAXSEQ]
log(f"device {device} {torch.cuda.get_device_name() if device.type=='cuda' else ''}; {len(train)} train / {len(test)} test chunks; "
    f"{sum(len(e['prompt'])+len(e['speech']) for e in train)} train tokens; layout {layout.to_dict()}")
BT = budget.get("batch_tokens", 32768)

def steps_for(name, model, loss_fn, trainable, minutes):
    """Time a few steps on this device and size the stage to its minutes (cosine schedule completes);
    a fixed count in budget["steps"] wins (a shared CPU's timings are too noisy to size from)."""
    if name in budget.get("steps", {}): return budget["steps"][name]
    if minutes <= 0: return budget.get("cpu_steps", 3)
    params = [p for n, p in model.named_parameters() if trainable is None or n in trainable]
    opt = torch.optim.AdamW(params, lr=1e-5)
    batches = make_batches(train, BT, random.Random(9))[:12]
    for i, b in enumerate(batches):
        if i == 4: sync(); t = time.time()
        with autocast(device): loss = loss_fn(to_device(collate(b, layout), device))
        opt.zero_grad(); loss.backward(); opt.step()
    sync(); per = (time.time() - t) / (len(batches) - 4)
    per_epoch = len(make_batches(train, BT, random.Random(9)))
    steps = max(50, min(int(minutes * 60 / per), int(budget.get("epochs", {}).get(name, 10) * per_epoch)))
    log(f"{name}: {per*1000:.0f} ms/step, {per_epoch} steps an epoch -> {steps} steps (<= {minutes} min)")
    return steps

@torch.no_grad()
def expected_acceptance(draft, target, examples):
    """Mean over sampled positions of sum_v min(p, q) at temperature 1 (teacher-forced)."""
    total = count = 0.0
    for b in make_batches(examples, BT, random.Random(0)):
        t = to_device(collate(b, layout), device)
        with autocast(device):
            q = target(input_ids=t["input_ids"], attention_mask=t["attention_mask"]).logits[:, :-1].float().softmax(-1)
            p = draft(input_ids=t["input_ids"], attention_mask=t["attention_mask"]).logits[:, :-1].float().softmax(-1)
        keep = t["labels"][:, 1:] != -100
        total += float(torch.minimum(p[keep], q[keep]).sum(-1).sum()); count += float(keep.sum())
    return total / max(count, 1)

summaries = {}
spec = ModelSpec(**budget["target"])
torch.manual_seed(1234)
target = make_llama(layout, spec).to(device)
INIT = Path(budget["init_from"]) if budget.get("init_from") else None
def warm(model, folder):
    """Start from a trained voice of the same widths: its transformer layers (and speech/special rows where
    the layouts agree) are copied (`training.train.warm_start`)."""
    if INIT is None or not (INIT / folder).exists(): return
    source = AutoModelForCausalLM.from_pretrained(INIT / folder, dtype=torch.float32)
    copied = warm_start(model, source, json.loads((INIT / "voice.json").read_text())["vocab"], layout)
    log(f"{folder}: warm start from {INIT / folder}: {len(copied)} tensors")
warm(target, "target")
mins = budget["minutes"]
fresh = lambda: make_llama(layout, spec).to(device)
probe = fresh(); s = steps_for("target", probe, lambda b: cross_entropy(probe, b), None, mins["target"]); del probe
lr = budget.get("target_lr", 2e-3)
NOISE, noise_rng = budget.get("speech_input_noise", 0.0), torch.Generator().manual_seed(7)  # see the function
RUNS = budget.get("neighbour_runs")  # {"rate": share of runs, "neighbours": k, "codebook": path}
if RUNS:
    NEAR = codebook_neighbours(np.load(RUNS["codebook"]), RUNS["neighbours"])
def target_loss(b):
    if RUNS:
        b = with_neighbour_runs(b, layout, RUNS["rate"], NEAR, noise_rng)
    return cross_entropy(target, with_noisy_speech_inputs(b, layout, NOISE, noise_rng) if NOISE else b)
summ = train_stage("target", target, target_loss, None, train, layout,
                   StageConfig(steps=s, lr=lr, warmup=min(200, s // 10), batch_tokens=BT, checkpoint_every=100,
                               max_minutes=mins["target"],
                               weight_decay=budget.get("weight_decay", 0.05)), out, stage_log("target", target))
summ["test_ce"] = evaluate_ce(target, test, layout, BT); summaries["target"] = summ
log(f"target test CE {summ['test_ce']:.4f}")
target.eval(); [p.requires_grad_(False) for p in target.parameters()]
dest = out / "voice"; dest.mkdir(parents=True, exist_ok=True)
import copy
copy.deepcopy(target).to("cpu").to(torch.float16).save_pretrained(dest / "target", safe_serialization=True)
(dest / "training.json").write_text(json.dumps(summaries, indent=1))

def run_draft(name, model, loss_fn, trainable, minutes, lr):
    s = steps_for(name, model, loss_fn, trainable, minutes)
    summ = train_stage(name, model, loss_fn, trainable, train, layout,
                       StageConfig(steps=s, lr=lr, warmup=min(100, s // 10), batch_tokens=BT, checkpoint_every=100,
                                   max_minutes=minutes), out,
                       stage_log(name, model) if name != "heads" else log)
    return summ

draft, trainable = layer_subset_draft(target, 1, 2); draft.to(device)
state0 = {k: v.clone() for k, v in draft.state_dict().items()}
summ = run_draft("layers", draft, lambda b: cross_entropy(draft, b), trainable, mins["layers"], 1e-3)
summ["test_ce"] = evaluate_ce(draft, test, layout, BT); summ["acceptance"] = expected_acceptance(draft, target, test)
summaries["layers"] = summ; log(f"layers: CE {summ['test_ce']:.4f} acceptance {summ['acceptance']:.3f}")

torch.manual_seed(1235)
distilled = make_llama(layout, ModelSpec(**budget["distilled"])).to(device)
warm(distilled, "draft_distilled")
summ = run_draft("distilled", distilled, lambda b: distillation_kl(distilled, target, b), None, mins["distilled"], 2e-3)
summ["test_ce"] = evaluate_ce(distilled, test, layout, BT); summ["acceptance"] = expected_acceptance(distilled, target, test)
summaries["distilled"] = summ; log(f"distilled: CE {summ['test_ce']:.4f} acceptance {summ['acceptance']:.3f}")

torch.manual_seed(1236)
heads = DraftHeads(HeadsConfig(hidden=spec.hidden, inner=budget.get("heads_inner", 1024), blocks=2)).to(device)
_warm_start_heads(heads, INIT, log)
U = budget.get("unroll", 8)
summ = run_draft("heads", heads, lambda b: heads_loss(heads, target, b, U), None, mins["heads"], 2e-3)
held = [to_device(collate(b, layout), device) for b in make_batches(test, BT, random.Random(0))]
with autocast(device): summ.update(evaluate_heads(heads, target, held, U))
summ["unroll"] = U; summaries["heads"] = summ
log(f"heads: expected acceptance by step {summ['expected_acceptance']}")

dest = out / "voice"; dest.mkdir(parents=True, exist_ok=True)
for name, folder, model in (("target", "target", target), ("layers", "draft_layers", draft), ("distilled", "draft_distilled", distilled)):
    model.to("cpu").to(torch.float16).save_pretrained(dest / folder, safe_serialization=True)
    summaries[name]["parameters"] = sum(p.numel() for p in model.parameters())
target.to(torch.float32)
heads.made_for = target_fingerprint(target)
heads.to("cpu").to(torch.float16).save(dest / "draft_heads")
summaries["heads"]["parameters"] = sum(p.numel() for p in heads.parameters())
summaries["curves"] = CURVES
summaries["budget"] = budget
summaries["dataset"] = {"chunks": len(stored["train_text"]), "supplements": meta.get("supplements", [])}
summaries["machine"] = (f"{torch.cuda.get_device_name() if device.type == 'cuda' else cpu_name()}, "
                        f"{budget.get('threads', 2)} threads, torch {torch.__version__}")
(dest / "training.json").write_text(json.dumps(summaries, indent=1))
log("done")
