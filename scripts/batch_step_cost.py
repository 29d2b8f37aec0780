"""What a batched decode step of the embedded voice's target costs against a one-row step: the measurement a
continuous-batching engine for many listeners at once would be sized from.

For each batch size B, B rows of cached context (a typical chunk's prompt and tokens so far, `--context`) take one
decode step together (one new token per row, every row attending to its own cache) through transformers' forward
with a DynamicCache, against a one-row step; interleaved, after a warm-up, medians of `--repeats`. Also the codec's
decoder on B windows in one call against B calls. Prints per B: ms per batched step, ms per row, the step against B
one-row steps, tokens/s for all rows together, and the codec's ratio.

With `--forward lean`, the batched step is the lean forward's maths for B rows at once (`LeanBatch`: fused
projections, each row at its own length in its own key/value slot, a mask for the lengths; a prototype for sizing a
batching engine, not used by the package), against one-row steps of the forward this machine chose for the voice
(`engine.kv.cached_lm`: ONNX Runtime or the lean forward).

    python -m scripts.batch_step_cost [--forward transformers|lean] [--sizes 1,2,4,8,16,32] [--context 300]
        [--repeats 20] [--threads 2]

Developer-only (imported by nothing).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache

from ssd_demo.backends.embedded import load_synthesizer
from ssd_demo.measure.reporting import cpu_name


def _cache(target, rows: int, context: int) -> tuple[DynamicCache, torch.Tensor]:
    """A cache of `context` positions for `rows` rows (random speech ids) and the next input id per row."""
    vocab = target.config.vocab_size
    ids = torch.randint(0, vocab, (rows, context))
    with torch.inference_mode():
        out = target(input_ids=ids, use_cache=True)
    return out.cache, torch.randint(0, vocab, (rows, 1))


def _step(target, cache: DynamicCache, next_ids: torch.Tensor, context: int) -> float:
    """Seconds for one decode step of every row; the cache is cut back after it so that steps repeat."""
    positions = torch.full((next_ids.shape[0], 1), context)
    start = time.perf_counter()
    with torch.inference_mode():
        target(input_ids=next_ids, cache=cache, position_ids=positions, use_cache=True)
    elapsed = time.perf_counter() - start
    cache.crop(-1)  # the step's own position: removed, so that steps repeat
    return elapsed


class LeanBatch:
    """The lean forward's maths (`engine.static_cache`) for B rows at once, one new token each, every row at its own
    length: a prototype that measures what a batched step would cost. Steps repeat at the same positions."""

    def __init__(self, model, rows: int, context: int):
        from ssd_demo.engine.static_cache import attention_shape

        core = model.model
        self.model, self.core = model, core
        self.heads, self.kv_heads, self.head_dim = attention_shape(model.config)
        with torch.inference_mode():
            self.layers = [dict(
                qkv=torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                               layer.self_attn.v_proj.weight]).t().contiguous(),
                o=layer.self_attn.o_proj.weight.t().contiguous(),
                gate_up=torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]).t().contiguous(),
                down=layer.mlp.down_proj.weight.t().contiguous(),
                norms=(layer.input_layernorm, layer.post_attention_layernorm)) for layer in core.layers]
            self.head = model.lm_head.weight.t().contiguous()
            # rows at different lengths (a real batch's), around `context`; each row's slot holds its own past
            self.lengths = torch.linspace(context * 0.6, context * 1.4, rows).long() if rows > 1 else \
                torch.tensor([context])
            capacity = int(self.lengths.max()) + 2
            shape = (len(self.layers), rows, self.kv_heads, capacity, self.head_dim)
            self.keys, self.values = torch.randn(shape) * 0.3, torch.randn(shape) * 0.3
            cos, sin = core.rotary_emb(torch.zeros(1), torch.arange(capacity)[None])
            self.cos, self.sin = cos[0], sin[0]  # [capacity, head_dim]
            self.mask = (torch.arange(capacity)[None] <= self.lengths[:, None])[:, None, None]  # [rows, 1, 1, T]
        self.rows = torch.arange(rows)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    @torch.inference_mode()
    def step(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [rows, vocab] of one new token per row (ids [rows])."""
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        rows, positions = ids.shape[0], self.lengths
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # [rows, 1, head_dim]
        end = int(positions.max()) + 1
        x = self.core.embed_tokens(ids)  # [rows, d]
        for index, layer in enumerate(self.layers):
            qkv = layer["norms"][0](x) @ layer["qkv"]
            q = self._rotate(qkv[:, : heads * head_dim].view(rows, heads, head_dim), cos, sin)
            k = self._rotate(qkv[:, heads * head_dim: (heads + kv_heads) * head_dim].view(rows, kv_heads, head_dim),
                             cos, sin)
            self.keys[index, self.rows, :, positions] = k
            self.values[index, self.rows, :, positions] = qkv[:, (heads + kv_heads) * head_dim:].view(
                rows, kv_heads, head_dim)
            attended = torch.nn.functional.scaled_dot_product_attention(
                q[:, :, None], self.keys[index, :, :, :end], self.values[index, :, :, :end],
                attn_mask=self.mask[..., :end], enable_gqa=kv_heads != heads)
            x = x + attended.reshape(rows, heads * head_dim) @ layer["o"]
            gate_up = layer["norms"][1](x) @ layer["gate_up"]
            width = gate_up.shape[-1] // 2
            x = x + (torch.nn.functional.silu(gate_up[:, :width]) * gate_up[:, width:]) @ layer["down"]
        return self.core.norm(x) @ self.head


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def lean_rows(target, sizes: list[int], context: int, repeats: int) -> None:
    """The batched lean step (`LeanBatch`) against one-row steps of the forward chosen here, interleaved."""
    from ssd_demo.engine import kv

    vocab = target.config.vocab_size
    one = kv.cached_lm(target, context + 8)
    one.forward(torch.randint(0, vocab, (context,)).tolist())
    token = [int(torch.randint(0, vocab, (1,)))]

    def one_step():
        one.forward(token, last_only=True)
        one.truncate(context)  # steps repeat at the same position

    print(f"one-row forward here: {kv.describe_kernels(target).split(' (')[0]}")
    print("| rows | batched lean step (ms) | per row (ms) | one-row step, forward chosen here (ms) | "
          "step / (rows x one-row) | tokens/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for rows in sizes:
        batch = LeanBatch(target, rows, context)
        ids = torch.randint(0, vocab, (rows,))
        for _ in range(3):  # warm-up
            batch.step(ids)
            one_step()
        batched, single = [], []
        for _ in range(repeats):  # interleaved
            batched.append(_timed(lambda: batch.step(ids)))
            single.append(_timed(one_step))
        step, one_row = statistics.median(batched), statistics.median(single)
        print(f"| {rows} | {step * 1e3:.2f} | {step * 1e3 / rows:.2f} | {one_row * 1e3:.2f} | "
              f"{step / (rows * one_row):.2f} | {rows / step:.0f} |", flush=True)
    one.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--context", type=int, default=300, help="cached positions per row (default 300)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--forward", choices=("transformers", "lean"), default="transformers",
                        help="the batched step through transformers' forward (default) or the lean forward's maths")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    synthesizer = load_synthesizer()
    if args.forward == "lean":
        print(f"{cpu_name()}, {args.threads} torch threads, context about {args.context}, medians of {args.repeats}")
        lean_rows(synthesizer.target, [int(size) for size in args.sizes.split(",")], args.context, args.repeats)
        return 0
    target = synthesizer.target  # read without transformers (`models.plain_llama`): its transformers twin is timed here
    target = (target.to_transformers() if hasattr(target, "to_transformers") else target).eval()
    sizes = [int(size) for size in args.sizes.split(",")]
    one_cache, one_next = _cache(target, 1, args.context)
    codec = synthesizer.backend.codec
    window = list(range(172))  # codes of one codec window (the embedded voice's largest)
    print(f"{cpu_name()}, {args.threads} torch threads, context {args.context}, medians of {args.repeats}")
    print("| rows | batched step (ms) | per row (ms) | one-row step (ms) | step / (rows x one-row) | tokens/s |"
          " codec, rows windows at once / one at a time |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rows in sizes:
        cache, next_ids = _cache(target, rows, args.context)
        for _ in range(3):  # warm-up
            _step(target, cache, next_ids, args.context)
            _step(target, one_cache, one_next, args.context)
        batched, single = [], []
        for _ in range(args.repeats):  # interleaved
            batched.append(_step(target, cache, next_ids, args.context))
            single.append(_step(target, one_cache, one_next, args.context))
        step, one = statistics.median(batched), statistics.median(single)
        codec_ratio = _codec_ratio(codec, window, rows, max(3, args.repeats // 4))
        print(f"| {rows} | {step * 1e3:.2f} | {step * 1e3 / rows:.2f} | {one * 1e3:.2f} | {step / (rows * one):.2f} | "
              f"{rows / step:.0f} | {codec_ratio} |", flush=True)
    return 0


def _codec_ratio(codec, window: list[int], rows: int, repeats: int) -> str:
    """The codec's ONNX decoder on `rows` windows in one call ([rows, latent_dim, frames]) against `rows` calls of
    one window, medians: below 1, batching the codec pays. "n/a" where the graph takes one window at a time."""
    import numpy as np

    from ssd_demo.speech.latent_codec import DECODER_OUTPUT, LATENT_INPUTS

    latent_input, mask_input = LATENT_INPUTS[codec.config.latent]
    one = np.ascontiguousarray(codec.codebook[np.asarray(window)].T[None].astype(np.float32))  # [1, d, frames]

    def feeds(batch: int) -> dict:
        z = np.ascontiguousarray(np.repeat(one, batch, axis=0))
        extra = {mask_input: np.ones((batch, 1, z.shape[2]), dtype=np.float32)} if mask_input is not None else {}
        return {latent_input: z, **extra}

    session = codec._decoder()
    together_feeds, one_feeds = feeds(rows), feeds(1)
    try:
        session.run([DECODER_OUTPUT], together_feeds)
    except Exception:  # noqa: BLE001 - a graph with a batch of one
        return "n/a"
    together, apart = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run([DECODER_OUTPUT], together_feeds)
        together.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(rows):
            session.run([DECODER_OUTPUT], one_feeds)
        apart.append(time.perf_counter() - start)
    return f"{np.median(together) / np.median(apart):.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
