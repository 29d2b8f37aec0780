"""`python -m ssd_demo bench`: AR vs speculative vs transformers' assisted generation.

All methods run on the same models, prompt and sampling settings, interleaved
(method order rotates each repetition so drift and thermal noise hit all of them),
after warm-up; we report medians and ratios inside the run, never absolute claims.

Methods:
  ar           our autoregressive_generate
  speculative  our speculative_generate (draft_len K, beta, rule)
  speculative_calibrated  the same with K chosen each round (up to draft_len, or 0 = an AR step)
               from this machine's measured draft and verify costs (`ssd_demo.engine.calibration`)
  ar_transformers, speculative_transformers
               the same two loops on transformers' own forward and DynamicCache instead of the
               lean static-cache step (static_cache=False): separates what the loop wins from
               what the forward implementation wins
  hf_assisted  target.generate(assistant_model=draft) with K tokens, constant schedule
  hf_assisted_default  the same with transformers' own defaults (heuristic K schedule starting
               at 20, confidence early stop): what a user gets without tuning
  hf_generate  plain target.generate

Next to each of our methods: its median time per target call (an AR step, or a verify call with its
acceptance), the time to stream the target's weights once on this CPU (a sum over a buffer of their size,
measured in every repetition, median) and their ratio: how far the step is from the floor a decode step
sits on, since it reads every weight once. The CPU's name goes with it.
"""

from __future__ import annotations

import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, LlamaForCausalLM

from ..errors import InputError
from ..models.cpu_threads import check_thread_count
from ..engine.calibration import calibrated_costs
from ..config import DecodingConfig
from ..engine.generate import autoregressive_generate, speculative_generate
from .reporting import cpu_name, git_commit
from ..engine.kv import describe_kernels, forward_threads
from ..engine.results import compare_runs
from ..engine.kernels import weight_bytes, weight_stream_seconds
from ..models.hub import auto_dtype

from .bench_options import (BENCH_MAX_NEW_TOKENS, DECODING_DEFAULTS, DECODING_FLAGS, DTYPE_NAMES, METHODS,  # noqa: F401
                            parse_methods)

_ASSISTANT_SETTINGS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def random_pair(vocab: int = 1024, seed: int = 0):
    """The default pair until trained weights are given: random Llamas, 12 x 512 and 2 x 256."""
    def build(layers: int, width: int, heads: int, offset: int):
        torch.manual_seed(seed + offset)
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=width,
            intermediate_size=width * 8 // 3 // 64 * 64 + 64,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=max(heads // 4, 1),
            max_position_embeddings=2048,
            tie_word_embeddings=False,
        )
        return LlamaForCausalLM(config).eval()

    return build(12, 512, 8, 0), build(2, 256, 4, 1)


#: `bench --dtype` names (`bench_options.DTYPE_NAMES`) and their dtypes; "auto" is the app's choice.
DTYPES = dict(zip(DTYPE_NAMES, (None, torch.float32, torch.bfloat16, torch.float16), strict=True))


def check_device(device: str) -> torch.device:
    """`device` as a torch device, present on this machine; InputError otherwise."""
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise InputError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"no CUDA device here for --device {device}: use --device cpu")
    if parsed.type not in ("cpu", "cuda"):
        raise InputError(f"device {device!r} is not supported here: use cpu, cuda or cuda:N")
    return parsed


def load_pair(target: str | None, draft: str | None, device: str, dtype: str = "auto"):
    """The pair (model directories, or the random pair) on `device` in `dtype` (a `DTYPES` name), checked to share
    a vocabulary."""
    torch_dtype = auto_dtype(check_device(device), DTYPES[dtype])
    if target is None and draft is None:
        return tuple(m.to(device, torch_dtype) for m in random_pair())
    if not (target and draft):
        raise InputError("give both --target and --draft (model directories), or neither for the random pair")
    models = []
    for path in (target, draft):
        if not Path(path).is_dir():
            raise FileNotFoundError(f"model directory not found: {path}")
        try:
            models.append(AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).eval())
        except (OSError, ValueError) as error:  # no config.json, an unknown model type, missing weights
            raise InputError(f"{path} holds no causal LM transformers can load: {error}") from None
    vocabularies = [model.get_output_embeddings().weight.shape[0] for model in models]
    if vocabularies[0] != vocabularies[1]:
        raise InputError(f"the target and the draft must share a vocabulary; their output layers have "
                         f"{vocabularies[0]} and {vocabularies[1]} ids")
    return tuple(m.to(device) for m in models)


@dataclass
class MethodSummary:
    method: str
    median_seconds: float
    median_tokens: float
    median_tokens_per_second: float
    speedup_vs_ar: float
    # Median seconds per target call (an AR step, or a verify call), and that over the weight-streaming
    # time on the same device (None for transformers' generate, which reports no per-call times).
    median_target_call_seconds: float | None = None
    target_call_vs_weight_stream: float | None = None


def _hf_generate(target, draft, prompt: torch.Tensor, config: DecodingConfig, assisted: bool,
                 pin_draft_len: bool = True) -> tuple[int, float]:
    sampling = not config.greedy
    generation = GenerationConfig(
        do_sample=sampling,
        temperature=config.temperature if sampling else None,
        top_k=config.top_k if sampling else None,
        top_p=config.top_p if sampling else None,
        max_new_tokens=config.max_new_tokens,
        min_new_tokens=config.max_new_tokens,  # same length as ours: no early stop
        eos_token_id=None,
        pad_token_id=0,
    )
    kwargs = {}
    saved = None
    if assisted:
        kwargs["assistant_model"] = draft
    if assisted and pin_draft_len:
        # transformers reads K, its schedule and the confidence stop from the ASSISTANT's
        # generation config (defaults: 20 tokens, a heuristic schedule that changes K every
        # round, early stop at confidence 0.4). Pin them so both methods draft exactly K.
        assistant_config = draft.generation_config
        saved = {name: getattr(assistant_config, name, None) for name in _ASSISTANT_SETTINGS}
        assistant_config.num_assistant_tokens = config.draft_len
        assistant_config.num_assistant_tokens_schedule = "constant"
        assistant_config.assistant_confidence_threshold = 0.0
    torch.manual_seed(config.seed or 0)
    try:
        start = time.perf_counter()
        with torch.inference_mode():
            output = target.generate(prompt, generation_config=generation, **kwargs)
        if prompt.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    finally:
        for name, value in (saved or {}).items():
            setattr(draft.generation_config, name, value)
    return output.shape[1] - prompt.shape[1], elapsed


class _Timings:
    """What the repetitions measured, per method: seconds, tokens, seconds per target call; the weight-streaming
    floor; our speculative run's comparison with AR in each repetition."""

    def __init__(self, methods: tuple[str, ...]):
        self.seconds: dict[str, list[float]] = {m: [] for m in methods}
        self.tokens: dict[str, list[int]] = {m: [] for m in methods}
        self.call_seconds: dict[str, list[float]] = {m: [] for m in methods}
        self.stream_seconds: list[float] = []
        self.reports: list = []
        self.last_speculative = None  # our speculative run's result in the last repetition

    def add(self, method: str, tokens: int, wall: float, result) -> None:
        self.seconds[method].append(wall)
        self.tokens[method].append(tokens)
        if result is not None:
            self.call_seconds[method].append(result.stats.mean_target_call_seconds)


def _run_method(method: str, target, draft, prompt: torch.Tensor, config: DecodingConfig,
                calibrated: DecodingConfig | None):
    """(result or None, tokens, wall seconds) of one method's run; None for transformers' generate."""
    result = None
    if method == "ar":
        result = autoregressive_generate(target, prompt, config)
    elif method == "speculative":
        result = speculative_generate(target, draft, prompt, config)
    elif method == "speculative_calibrated":
        result = speculative_generate(target, draft, prompt, calibrated.with_(seed=config.seed))
    elif method == "ar_transformers":
        result = autoregressive_generate(target, prompt, config, static_cache=False)
    elif method == "speculative_transformers":
        result = speculative_generate(target, draft, prompt, config, static_cache=False)
    if result is not None:
        return result, len(result.tokens), result.stats.wall_seconds
    tokens, wall = _hf_generate(target, draft, prompt, config, assisted=method.startswith("hf_assisted"),
                                pin_draft_len=method == "hf_assisted")
    return None, tokens, wall


def run_benchmark(target, draft, prompt: torch.Tensor, config: DecodingConfig, repeats: int, warmup: int = 1,
                  methods=METHODS, progress: bool = True) -> dict:
    """Every method `warmup + repeats` times, interleaved (the order rotates each repetition); the medians of
    the timed repetitions, their ratios, and the weight-streaming floor on the models' device."""
    methods = tuple(methods)
    costs = calibrated_costs(target, draft) if "speculative_calibrated" in methods else None
    calibrated = config.with_(adaptive_draft_len=True, cost_ratio=costs.draft, verify_costs=costs.verify) \
        if costs is not None else None
    timings = _Timings(methods)
    bar = tqdm(total=(warmup + repeats) * len(methods), desc="bench", disable=not progress)
    for rep in range(warmup + repeats):
        timed = rep >= warmup
        order = list(methods[rep % len(methods):]) + list(methods[: rep % len(methods)])
        run_config = config.with_(seed=(config.seed or 0) + rep)
        if timed:  # the weight-streaming floor, measured once per repetition among the methods, on as many
            # threads as the target's forward (ONNX Runtime may run one where torch has two)
            timings.stream_seconds.append(weight_stream_seconds(target, repeats=5, threads=forward_threads(target)))
        results = {}
        for method in order:
            result, tokens, wall = _run_method(method, target, draft, prompt, run_config, calibrated)
            results[method] = result
            if timed:
                timings.add(method, tokens, wall, result)
            bar.update(1)
        timings.last_speculative = results.get("speculative")
        if timed and results.get("ar") is not None and results.get("speculative") is not None:
            timings.reports.append(compare_runs(results["ar"], results["speculative"]))
    bar.close()
    return _benchmark_result(methods, timings, target, costs)


def _benchmark_result(methods: tuple[str, ...], timings: _Timings, target, costs) -> dict:
    """The medians and ratios `run_benchmark` reports (see `markdown_table`)."""
    median = statistics.median
    seconds = timings.seconds
    ar_seconds = median(seconds["ar"]) if "ar" in seconds else None
    stream = median(timings.stream_seconds) if timings.stream_seconds else None
    result = {"methods": [asdict(_method_summary(m, timings, ar_seconds, stream)) for m in methods]}
    if stream is not None:
        size = weight_bytes(target)
        device = next(target.parameters()).device
        result["weight_stream"] = {"bytes": size, "seconds": stream, "gigabytes_per_second": size / stream / 1e9,
                                   "cpu": cpu_name(), "threads": forward_threads(target),
                                   "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                                   "dtype": str(next(target.parameters()).dtype).removeprefix("torch.")}
    if costs is not None:
        result["calibration"] = {"cost_ratio": costs.draft, "verify_costs": list(costs.verify),
                                 "described": costs.describe()}
    if timings.reports:
        result["speculative"] = _speculative_summary(timings.reports, timings.last_speculative)
    if "speculative" in seconds and "hf_assisted" in seconds:
        result["speculative_vs_hf_assisted"] = median(seconds["hf_assisted"]) / median(seconds["speculative"])
    if "speculative_transformers" in seconds and "hf_assisted" in seconds:
        result["speculative_transformers_vs_hf_assisted"] = (
            median(seconds["hf_assisted"]) / median(seconds["speculative_transformers"])
        )
    return result


def _method_summary(method: str, timings: _Timings, ar_seconds: float | None, stream: float | None) -> MethodSummary:
    median = statistics.median
    seconds, tokens, calls = timings.seconds[method], timings.tokens[method], timings.call_seconds[method]
    call = median(calls) if calls else None
    return MethodSummary(
        method=method,
        median_seconds=median(seconds),
        median_tokens=median(tokens),
        median_tokens_per_second=median(n / s for n, s in zip(tokens, seconds)),
        speedup_vs_ar=(ar_seconds / median(seconds)) if ar_seconds else float("nan"),
        median_target_call_seconds=call,
        target_call_vs_weight_stream=call / stream if call is not None and stream else None,
    )


def _speculative_summary(reports: list, last_speculative) -> dict:
    """Our speculative run against AR: medians over the repetitions of `compare_runs`' numbers."""
    median = statistics.median
    stats = last_speculative.stats if last_speculative else None
    return {
        "alpha": median(r.alpha for r in reports),
        "acceptance_rate": stats.acceptance_rate if stats else None,
        "cost_ratio": median(r.cost_ratio for r in reports),
        "verify_ratio": median(r.verify_ratio for r in reports),
        "measured_decode_speedup": median(r.measured for r in reports),
        "predicted_speedup_classic": median(r.predicted for r in reports),
        "predicted_speedup_strict": median(r.predicted_strict for r in reports),
        "fraction_of_strict_prediction": median(r.fraction_of_prediction for r in reports),
        "mean_accepted_length": stats.mean_accepted_length if stats else None,
    }


def markdown_table(result: dict) -> str:
    lines = ["| method | median s | tokens | tokens/s | speedup vs AR | ms per target call | x weight stream |",
             "|---|---|---|---|---|---|---|"]
    for m in result["methods"]:
        call, ratio = m.get("median_target_call_seconds"), m.get("target_call_vs_weight_stream")
        lines.append(
            f"| {m['method']} | {m['median_seconds']:.3f} | {m['median_tokens']:.0f} | "
            f"{m['median_tokens_per_second']:.1f} | {m['speedup_vs_ar']:.2f}x | "
            f"{'-' if call is None else f'{call * 1e3:.2f}'} | {'-' if ratio is None else f'{ratio:.2f}x'} |"
        )
    stream = result.get("weight_stream")
    if stream:
        lines.append("")
        where = stream["device"] if stream.get("device") not in (None, "cpu") else (
            f"{stream['cpu']}, {stream['threads']} thread(s), as the target's forward")
        lines.append(
            f"{where}: the target's {stream['bytes'] / 1e6:.1f} MB of weights ({stream.get('dtype', 'float32')}) "
            f"stream once in {stream['seconds'] * 1e3:.2f} ms ({stream['gigabytes_per_second']:.1f} GB/s; "
            "a sum over a buffer of that size, median over the repetitions)")
    spec = result.get("speculative")
    if spec:
        lines.append("")
        versus = result.get("speculative_vs_hf_assisted")  # only when hf_assisted ran too
        lines.append(
            (f"speculative vs hf_assisted: {versus:.2f}x; " if versus is not None else "speculative: ")
            + f"alpha {spec['alpha']:.3f}, c {spec['cost_ratio']:.3f}, v {spec['verify_ratio']:.2f}; "
            f"decode speedup measured {spec['measured_decode_speedup']:.2f}x vs predicted "
            f"{spec['predicted_speedup_strict']:.2f}x strict / {spec['predicted_speedup_classic']:.2f}x classic "
            f"({100 * spec['fraction_of_strict_prediction']:.0f}% of strict)"
        )
    if "speculative_transformers_vs_hf_assisted" in result:
        lines.append(
            "speculative on transformers' forward vs hf_assisted: "
            f"{result['speculative_transformers_vs_hf_assisted']:.2f}x"
        )
    if "calibration" in result:
        lines.append(f"calibrated on this machine: {result['calibration']['described']}")
    if "machine" in result:
        machine = result["machine"]
        lines.append(f"target forward: {machine['kernels']}")
        if "draft_kernels" in machine:
            lines.append(f"draft forward: {machine['draft_kernels']}")
        if machine.get("device") == "cpu" and machine.get("dtype", "float32") != "float32":
            lines.append(f"note: {machine['dtype']} on a CPU runs slow matmul paths here; the app uses float32 on a CPU")
    return "\n".join(lines)


def benchmark(settings: dict, methods: tuple[str, ...], *, target: str | None = None, draft: str | None = None,
              device: str = "cpu", dtype: str = "auto", prompt_len: int = 32, repeats: int = 7, warmup: int = 1,
              threads: int = 0) -> dict:
    """`python -m ssd_demo bench`: the pair (model directories, or the random pair) on a random prompt of
    `prompt_len` tokens seeded by the settings' seed, timed by `run_benchmark`; with the machine and commit."""
    if repeats < 1 or warmup < 0 or prompt_len < 1:
        raise InputError("bench needs --repeats >= 1, --warmup >= 0 and --prompt-len >= 1")
    if threads:
        check_thread_count(threads)
        torch.set_num_threads(threads)
    target_model, draft_model = load_pair(target, draft, device, dtype)
    config = DecodingConfig(**settings)
    vocab = target_model.get_output_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(settings["seed"])
    prompt = torch.randint(0, vocab, (1, prompt_len), generator=generator).to(device)
    result = run_benchmark(target_model, draft_model, prompt, config, repeats=repeats, warmup=warmup, methods=methods)
    result["machine"] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "cuda": torch.cuda.get_device_name() if device.startswith("cuda") else None,
        "dtype": str(next(target_model.parameters()).dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "kernels": describe_kernels(target_model),
        "draft_kernels": describe_kernels(draft_model),
    }
    result["commit"] = git_commit()
    return result
