"""What a batched decode step of the embedded voice's target costs against a one-row step: the measurement a
continuous-batching engine for many listeners at once would be sized from.

For each batch size B, B rows of cached context (a typical chunk's prompt and tokens so far, `--context`) take one
decode step together (one new token per row, every row attending to its own cache) through transformers' forward
with a DynamicCache, against a one-row step; interleaved, after a warm-up, medians of `--repeats`. Also the codec's
decoder on B windows in one call against B calls. Prints per B: ms per batched step, ms per row, the step against B
one-row steps, tokens/s for all rows together, and the codec's ratio.

With `--forward engine`, the batched steps are the batching engine's own (`engine.batched_forward.BatchedLM`,
torch's, and `engine.onnx_batched.OnnxBatchedLM`, ONNX Runtime's: each row at its own length, spread 0.6-1.4x
`--context`), against one-row steps of the forward this machine chose for the voice (`engine.kv.cached_lm`).

    python -m scripts.batch_step_cost [--forward transformers|engine] [--sizes 1,2,4,8,16,32] [--context 300]
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


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def engine_rows(target, sizes: list[int], context: int, repeats: int) -> None:
    """The batching engine's two batched steps (torch's `BatchedLM`, ONNX Runtime's `OnnxBatchedLM`) against one-row
    steps of the forward chosen here, interleaved; rows at lengths spread around `context`."""
    from ssd_demo.engine import kv
    from ssd_demo.engine.batched_forward import BatchedLM
    from ssd_demo.engine.onnx_batched import OnnxBatchedLM

    vocab = target.config.vocab_size
    one = kv.cached_lm(target, context + 8)
    one.forward(torch.randint(0, vocab, (context,)).tolist())
    token = [int(torch.randint(0, vocab, (1,)))]

    def one_step():
        one.forward(token, last_only=True)
        one.truncate(context)  # steps repeat at the same position

    print(f"one-row forward here: {kv.describe_kernels(target).split(' (')[0]}")
    print("| rows | torch step (ms) | ONNX Runtime step (ms) | per row (ms) | one-row step, forward chosen here (ms) | "
          "ONNX Runtime step / (rows x one-row) | tokens/s (ONNX Runtime) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rows in sizes:
        lengths = torch.linspace(context * 0.6, context * 1.4, rows).long().tolist() if rows > 1 else [context]
        forwards = [kind(target, rows, max(lengths) + 8) for kind in (BatchedLM, OnnxBatchedLM)]
        for forward in forwards:
            for row, length in enumerate(lengths):
                forward.prefill(row, torch.randint(0, vocab, (length,)).tolist())
        ids = [[int(token)] for token in torch.randint(0, vocab, (rows,))]

        def batched_step(forward) -> None:
            forward.step(ids)
            forward.lengths[:rows] = lengths  # steps repeat at the same positions

        for _ in range(3):  # warm-up
            for forward in forwards:
                batched_step(forward)
            one_step()
        times: list[list[float]] = [[], [], []]
        for _ in range(repeats):  # interleaved
            for index, forward in enumerate(forwards):
                times[index].append(_timed(lambda: batched_step(forward)))
            times[2].append(_timed(one_step))
        torch_step, onnx_step, one_row = (statistics.median(series) for series in times)
        print(f"| {rows} | {torch_step * 1e3:.2f} | {onnx_step * 1e3:.2f} | {onnx_step * 1e3 / rows:.2f} | "
              f"{one_row * 1e3:.2f} | {onnx_step / (rows * one_row):.2f} | {rows / onnx_step:.0f} |", flush=True)
    one.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--context", type=int, default=300, help="cached positions per row (default 300)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--forward", choices=("transformers", "engine"), default="transformers",
                        help="the batched step through transformers' forward (default) or the batching engine's own")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    synthesizer = load_synthesizer()
    if args.forward == "engine":
        print(f"{cpu_name()}, {args.threads} torch threads, context about {args.context}, medians of {args.repeats}")
        engine_rows(synthesizer.target, [int(size) for size in args.sizes.split(",")], args.context, args.repeats)
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
