"""`python -m scripts.decode_step`: where a CPU decode step's time goes, against the time to stream the weights.

A decode step reads every weight once, so on one core the time to stream the weights from memory bounds it
from below. This script measures, on one model, each candidate in its steady state (several calls in a row,
the first ones not kept, as in a decoding run, where one model's weights stay in whatever cache holds them
between steps), the candidates interleaved, medians:

- the weight-streaming time (a sum over a buffer of the weights' size, `kernels.weight_stream_seconds`);
- the step's one-row matmuls alone, in the step's order, with each candidate kernel: BLAS on [in, out]
  weights (what the lean forward uses), `F.linear` on [out, in], `torch.mv`, oneDNN's packed matmul, and,
  as lower-precision candidates (not exact: they change the voice's distribution), bfloat16 weights through
  BLAS and through oneDNN, and int8 weight-only (`torch._weight_int8pack_mm`);
- the lean forward's step (1 new token) and a verify call (5 tokens) after `--context` cached tokens, with
  each kernel the probe can choose, ONNX Runtime's graph of the same forward (`onnx_forward`), and
  transformers' own forward for scale; with `--baseline CHECKOUT`, the
  lean forward of another checkout of this repository too (its `ssd_demo/engine/static_cache.py`, run on this
  checkout's kernels module), e.g. the commit before a change, so that one run times both;
- with `--voice`, what the issue's bar is about: the embedded voice speaking its example texts
  (`Synthesizer.synthesize`, AR and speculative interleaved), seconds per target call of each (an AR step with
  its sampling; a verify call with its acceptance) against the weight-streaming time measured between runs;
- with `--compile`, a static-shape step compiled by inductor (frozen weights; `--autotune` adds its CPU
  GEMM templates), its compile time and step time. Slow: tens of seconds per variant.

It checks that the lean step's logits match transformers' within the tests' tolerance. Developer-only:
the numbers feed docs/benchmarks.md ("Decode step against the weight-streaming time").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F

from scripts._cli import run_cli

from ssd_demo.engine import kernels, onnx_forward
from ssd_demo.engine.kv import CachedLM
from ssd_demo.engine.static_cache import StaticCacheLM
from ssd_demo.measure.reporting import cpu_name

DEFAULT_TARGET = "assets/embedded/target"


def interleaved(candidates: dict[str, Callable[[], object]], repeats: int, block: int = 10) -> dict[str, float]:
    """Median seconds of each candidate in its steady state: rounds in which each candidate runs `block` times
    in a row (order alternating between rounds, against drift), the first half of each block not timed, since
    the other candidates have just pushed its weights out of the caches. `repeats` timed calls per candidate."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    items = list(candidates.items())
    timed_per_block = block - block // 2
    for round_index in range(1 + -(-repeats // timed_per_block)):  # the first round warms up
        for name, call in (items if round_index % 2 else items[::-1]):
            for index in range(block):
                started = time.perf_counter()
                call()
                if round_index and index >= block // 2:
                    times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def matmul_candidates(model) -> dict[str, Callable[[], object]]:
    """The step's one-row projections (q|k|v, o, gate|up, down per layer, then the head) with each kernel."""
    layers, head = kernels.packed_weights(model)
    weights = [linear.weight_t for layer in layers for linear in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    weights.append(head.weight_t)  # [in, out]
    rows = {w.shape[0]: torch.randn(1, w.shape[0]) for w in weights}
    rows_bf16 = {width: row.bfloat16() for width, row in rows.items()}
    out_in = [w.T.contiguous() for w in weights]

    def run(call, prepared, inputs):
        return lambda: [call(inputs[w_in], w) for w_in, w in prepared]

    candidates = {
        "BLAS x @ W[in,out] (lean forward)": run(torch.mm, [(w.shape[0], w) for w in weights], rows),
        "F.linear W[out,in]": run(F.linear, [(w.shape[1], w) for w in out_in], rows),
        "torch.mv W[out,in]": run(lambda x, w: torch.mv(w, x[0]), [(w.shape[1], w) for w in out_in], rows),
    }
    try:
        packed = [(w.shape[1], torch.ops.mkldnn._reorder_linear_weight(w)) for w in out_in]
        onednn = lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")  # noqa: E731
        candidates["oneDNN packed"] = run(onednn, packed, rows)
        packed_bf16 = [(w.shape[1], torch.ops.mkldnn._reorder_linear_weight(w.bfloat16())) for w in out_in]
        candidates["bfloat16 oneDNN packed (not exact)"] = run(onednn, packed_bf16, rows_bf16)
    except (AttributeError, RuntimeError) as error:
        print(f"(oneDNN candidates skipped: {error})")
    candidates["bfloat16 BLAS (not exact)"] = run(torch.mm, [(w.shape[0], w.bfloat16()) for w in weights], rows_bf16)
    try:
        int8 = []
        for w in out_in:
            scales = w.abs().amax(dim=1).clamp(min=1e-8) / 127
            int8.append((w.shape[1], ((w / scales[:, None]).round().to(torch.int8), scales)))
        torch._weight_int8pack_mm(rows[int8[0][0]], *int8[0][1])
        candidates["int8 weight-only (not exact)"] = run(lambda x, w: torch._weight_int8pack_mm(x, *w), int8, rows)
    except (AttributeError, RuntimeError) as error:
        print(f"(int8 candidate skipped: {error})")
    return candidates


def baseline_class(checkout: str):
    """The lean forward class of another checkout (its static_cache.py loaded as a module of this package, so that
    its relative imports find this checkout's kernels)."""
    import importlib.util
    from pathlib import Path

    path = Path(checkout) / "ssd_demo" / "engine" / "static_cache.py"
    if not path.is_file():
        raise FileNotFoundError(f"no ssd_demo/engine/static_cache.py under {checkout}")
    spec = importlib.util.spec_from_file_location("ssd_demo.engine.baseline_static_cache", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StaticCacheLM


def step_candidates(model, context: int, baseline: str | None = None) -> tuple[dict[str, Callable[[], object]], float]:
    """The lean forward's 1- and 5-token calls after `context` cached tokens with each kernel, and transformers'
    own forward (and a baseline checkout's lean forward on BLAS); also the largest logit difference between the
    lean step and transformers'."""
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (context + 5,), generator=torch.Generator().manual_seed(0))
    lms = {"BLAS": StaticCacheLM(model, context + 8, onednn_from=kernels.NEVER),
           "oneDNN": StaticCacheLM(model, context + 8, onednn_from=1),
           "transformers' forward": CachedLM(model)}
    if onnx_forward.supports(model) is None:
        lms["ONNX Runtime"] = onnx_forward.OnnxForward(model, context + 8)
    if baseline:
        lms["baseline, BLAS"] = baseline_class(baseline)(model, context + 8, onednn_from=kernels.NEVER)
    for lm in lms.values():
        lm.forward(ids[:context])
    reference = lms["transformers' forward"].forward(ids[context:context + 5])
    difference = (lms["BLAS"].forward(ids[context:context + 5]) - reference).abs().max().item()

    def call(lm, rows):
        def run():
            lm.truncate(context)
            lm.forward(ids[context:context + rows], last_only=rows == 1)
        return run

    candidates = {f"{name}, {rows} token{'s' if rows > 1 else ''}": call(lm, rows)
                  for rows in (1, 5) for name, lm in lms.items()}
    return candidates, difference


def compiled_step(model, context: int, autotune: bool, repeats: int, cpp_wrapper: bool = False) -> tuple[float, float]:
    """(compile seconds, step seconds) of a static-shape one-token step (gpt-fast style: the whole cache with
    a mask, positions as tensors) compiled by inductor with frozen weights."""
    import torch._inductor.config as inductor

    from transformers.models.llama.modeling_llama import rotate_half

    inductor.freezing = True
    inductor.max_autotune = autotune
    inductor.cpp_wrapper = cpp_wrapper
    config, core = model.config, model.model
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    capacity = context + 8
    keys = torch.zeros(len(core.layers), 1, kv_heads, capacity, head_dim)
    values = torch.zeros_like(keys)
    cos, sin = core.rotary_emb(keys.new_zeros(1, 1, 1), torch.arange(capacity)[None])

    def step(ids, position):
        hidden = core.embed_tokens(ids)
        c, s = cos[0, position][:, None], sin[0, position][:, None]
        mask = (torch.arange(capacity) <= position)[None, None]
        for index, layer in enumerate(core.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(1, heads, head_dim)
            k = attn.k_proj(x).view(1, kv_heads, head_dim)
            q, k = q * c + rotate_half(q) * s, k * c + rotate_half(k) * s
            keys[index].index_copy_(2, position, k.transpose(0, 1)[None])
            values[index].index_copy_(2, position, attn.v_proj(x).view(1, kv_heads, head_dim).transpose(0, 1)[None])
            out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys[index], values[index], attn_mask=mask,
                                                 scale=attn.scaling, enable_gqa=kv_heads != heads)
            hidden = hidden + attn.o_proj(out[0].transpose(0, 1).reshape(1, heads * head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return model.lm_head(core.norm(hidden))

    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (context + 1,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        started = time.perf_counter()
        compiled = torch.compile(step, fullgraph=True)
        compiled(ids[:1], torch.tensor([0]))
        compile_seconds = time.perf_counter() - started
        for position in range(1, context):
            compiled(ids[position:position + 1], torch.tensor([position]))
        last = torch.tensor([context])
        seconds = interleaved({"compiled": lambda: compiled(ids[context:], last)}, repeats)["compiled"]
    return compile_seconds, seconds


def voice_calls(runs: int, texts: int, baseline: str | None = None) -> dict[str, float]:
    """Median seconds per target call of the embedded voice speaking its first `texts` example texts, AR and
    speculative (default draft and settings), interleaved `runs` times, and the weight-streaming time measured
    between runs. With `baseline`, the same runs on that checkout's lean forward too, interleaved with ours."""
    from pathlib import Path

    from ssd_demo import load_synthesizer
    from ssd_demo.engine import kv

    synthesizer = load_synthesizer()
    examples = Path("assets/embedded/examples.txt").read_text(encoding="utf-8").splitlines()[:texts]
    text = " ".join(line for line in examples if line.strip())
    forwards = {"": kv.StaticCacheLM}
    if baseline:
        forwards["baseline, "] = baseline_class(baseline)
    times: dict[str, list[float]] = {"stream": []}
    try:
        for run in range(runs + 1):  # the first run warms up (and runs the kernel probe)
            for engine, forward in (forwards.items() if run % 2 else list(forwards.items())[::-1]):
                kv.StaticCacheLM = forward  # what `kv.cached_lm` builds
                for mode in (("ar", "speculative") if run % 2 else ("speculative", "ar")):
                    stats = synthesizer.synthesize(text, mode=mode).generation.stats
                    if run:
                        times.setdefault(f"{engine}{mode}", []).append(stats.mean_target_call_seconds)
            if run:
                times["stream"].append(kernels.weight_stream_seconds(synthesizer.target, repeats=5))
    finally:
        kv.StaticCacheLM = forwards[""]
    return {name: statistics.median(values) for name, values in times.items()}


STREAM = "weights streamed once (a sum)"
VOICE_LABELS = {"ar": "AR step per target call", "speculative": "speculative, per verify call"}


def report(seconds: dict[str, float], megabytes: float) -> None:
    stream = seconds[STREAM]
    for name, value in seconds.items():
        extra = f" ({megabytes / 1e3 / value:.1f} GB/s)" if name == STREAM else ""
        print(f"  {name:40s} {value * 1e3:7.3f} ms  {value / stream:5.2f}x streaming{extra}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=DEFAULT_TARGET, help="model directory (default: the embedded target)")
    parser.add_argument("--context", type=int, default=250, help="cached tokens before the timed calls")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", metavar="CHECKOUT", help="also time this checkout's lean forward (e.g. ../base)")
    parser.add_argument("--voice", action="store_true",
                        help="also time the embedded voice's synthesis (AR, speculative)")
    parser.add_argument("--voice-runs", type=int, default=5)
    parser.add_argument("--voice-texts", type=int, default=3, help="example texts spoken per run")
    parser.add_argument("--compile", action="store_true", help="also time an inductor-compiled step (slow)")
    parser.add_argument("--autotune", action="store_true", help="with --compile: inductor's max-autotune")
    parser.add_argument("--cpp-wrapper", action="store_true",
                        help="with --compile: inductor's C++ wrapper (no Python between the kernels)")


def main(args: argparse.Namespace) -> int:
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    megabytes = kernels.weight_bytes(model) / 1e6
    # The streaming read is one more candidate in each interleaved set: each ratio is taken within its set.
    buffer = torch.ones(kernels.weight_bytes(model) // 4)
    print(f"{cpu_name()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}; weights {megabytes:.1f} MB")
    with torch.inference_mode():
        matmuls = interleaved({STREAM: buffer.sum, **matmul_candidates(model)}, args.repeats)
        steps, difference = step_candidates(model, args.context, args.baseline)
        steps = interleaved({STREAM: buffer.sum, **steps}, args.repeats)
    print(f"\nthe step's one-row matmuls alone ({len(kernels.packed_linears(kernels.packed_weights(model)))} calls):")
    report(matmuls, megabytes)
    print(f"\nlean forward after {args.context} cached tokens (logits vs transformers': max |diff| {difference:.1e}):")
    report(steps, megabytes)
    stream = statistics.median([matmuls[STREAM], steps[STREAM]])
    if args.voice:
        voice = voice_calls(args.voice_runs, args.voice_texts, args.baseline)
        print(f"\nthe embedded voice, {args.voice_texts} example texts, {args.voice_runs} runs per mode "
              f"(weights streamed once in {voice['stream'] * 1e3:.3f} ms between runs):")
        for name, seconds in voice.items():
            if name != "stream":
                engine, _, mode = name.rpartition(", ")
                label = (f"{engine}, " if engine else "") + VOICE_LABELS[mode]
                print(f"  {label:40s} {seconds * 1e3:7.3f} ms  {seconds / voice['stream']:5.2f}x streaming")
    if args.compile:
        compile_seconds, seconds = compiled_step(model, args.context, args.autotune, args.repeats, args.cpp_wrapper)
        label = "inductor, frozen" + (", max-autotune" if args.autotune else "") + (", C++" if args.cpp_wrapper else "")
        print(f"  {label + ', 1 token':40s} {seconds * 1e3:7.3f} ms  {seconds / stream:5.2f}x streaming "
              f"(compile {compile_seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli("python -m scripts.decode_step", __doc__, add_arguments, main))
