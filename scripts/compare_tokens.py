"""Dump deterministic decoding outputs to JSON, to prove that a change (a refactor) kept behaviour identical.

For fixed seeds it records, for tiny random Llama pairs built here and for the embedded voice, the full
generated token lists, every round's draft/accept record and the run statistics (timings left out), and
for the voice each chunk's tokens and a sha256 of the audio's float32 bytes. Two dumps that compare
identical mean: same tokens, same rounds, same audio, for every case covered.

The matmul kernel of the lean static-cache forward is pinned to BLAS (SSD_DEMO_MATMUL=blas, set below
before ssd_demo is imported): its default, "auto", picks the kernel by timing both on this machine, and
the two kernels round differently, so timing noise could otherwise change tokens between runs.

Run it on two commits and compare (from the new checkout's root; this script runs against both):

    new=$PWD
    git worktree add ../old <old-commit>
    (cd ../old && PYTHONPATH=$PWD python "$new/scripts/compare_tokens.py" --out /tmp/old.json)
    PYTHONPATH=$PWD python scripts/compare_tokens.py --out /tmp/new.json
    python scripts/compare_tokens.py --compare /tmp/old.json /tmp/new.json   # exit 0: identical
    git worktree remove ../old

Run both dumps on the same machine with the same Python environment: float rounding differs between
CPUs and library builds (torch and transformers versions are recorded under "meta", and a mismatch is
reported). It imports only the public API (DecodingConfig, autoregressive_generate, speculative_generate,
load_synthesizer, ssd_demo.rules.make_rule) and the app's `compare` for one click (found under either
layout of the app). One CPU thread; about a minute on an idle core.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

os.environ["SSD_DEMO_MATMUL"] = "blas"  # pinned: see the docstring

try:
    import numpy as np
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    from ssd_demo import DecodingConfig, autoregressive_generate, load_synthesizer, speculative_generate
    from ssd_demo.rules import make_rule
except ImportError as error:  # --compare needs none of these; --out says what failed
    IMPORT_ERROR: ImportError | None = error
else:
    IMPORT_ERROR = None

Case = dict[str, Any]

STATIC_CACHE_ENV = "SSD_DEMO_STATIC_CACHE"
CACHES = {"static": True, "dynamic": False}
SEEDS = (0, 1, 2, 3)
SAMPLING_TEMPERATURE = 0.9
MAX_NEW_TOKENS = 48

# RoundRecord and GenerationStats fields that do not depend on timing.
ROUND_FIELDS = ("drafted", "accepted", "next_token", "next_kind", "expected_acceptance", "draft_calls",
                "target_cache_len", "draft_cache_len", "committed", "forced_counts")
STATS_FIELDS = ("mode", "new_tokens", "rounds", "target_calls", "draft_calls", "drafted_tokens", "accepted_tokens",
                "acceptance_rate", "alpha", "mean_tokens_per_call", "mean_accepted_length", "finish_reason",
                "draft_len", "seed", "forced_tokens")

# Acceptance rule label -> config overrides: the registry's four rules, ssd at two tolerances.
RULE_SETTINGS: dict[str, dict[str, Any]] = {
    "exact": {"acceptance": "exact"},
    "ssd_b0": {"acceptance": "ssd", "beta": 0.0},
    "ssd_b0.3": {"acceptance": "ssd", "beta": 0.3},
    "topk2": {"acceptance": "topk", "topk_tolerance": 2},
    "pcg": {"acceptance": "pcg", "pcg_theta": 0.3},
}

# Draft setting label -> config overrides: how K is chosen each round. Fixed, adaptive (predicted speedup),
# calibrated (measured verify costs, may choose K = 0), and early stop on low draft confidence.
DRAFT_SETTINGS: dict[str, dict[str, Any]] = {
    "k1": {"draft_len": 1},
    "k4": {"draft_len": 4},
    "adaptive": {"draft_len": 6, "adaptive_draft_len": True, "cost_ratio": 0.2},
    "calibrated": {"draft_len": 6, "adaptive_draft_len": True, "cost_ratio": 0.1,
                   "verify_costs": (1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5)},
    "threshold": {"draft_len": 4, "adaptive_threshold": 0.6},
}


# --- tiny random models --------------------------------------------------------------------------------


def tiny_llama(seed: int, vocab: int, layers: int, width: int = 16, init: float = 1.0) -> LlamaForCausalLM:
    """A random Llama (no download); a large init range gives peaky, model-specific distributions."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         initializer_range=init, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def truncated_draft(target: LlamaForCausalLM, seed: int) -> LlamaForCausalLM:
    """A one-layer draft sharing the target's embeddings, first layer, norm and output layer (high acceptance)."""
    draft = tiny_llama(seed, target.config.vocab_size, 1, target.config.hidden_size,
                       target.config.initializer_range)
    shared = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.") or
              k.startswith("model.layers.0.")}
    draft.load_state_dict(shared)
    return draft


def weights_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


@dataclass
class TinyPair:
    name: str
    target: LlamaForCausalLM
    draft: LlamaForCausalLM
    prompt: list[int]
    base: DecodingConfig  # end token, mask, top-k / top-p; temperature, seed and K are set per case

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.tensor([self.prompt], dtype=torch.long)


def tiny_pairs() -> list[TinyPair]:
    """An unrelated draft (low acceptance, no end token) and a truncated-target draft (high acceptance,
    end token, allowed-token mask, top-k and top-p)."""
    target16 = tiny_llama(seed=11, vocab=16, layers=2)
    target32 = tiny_llama(seed=21, vocab=32, layers=2)
    return [
        TinyPair("v16_random_draft", target16, tiny_llama(seed=12, vocab=16, layers=1), [3, 1, 4, 1, 5],
                 DecodingConfig(max_new_tokens=MAX_NEW_TOKENS)),
        TinyPair("v32_truncated_draft", target32, truncated_draft(target32, seed=22), [2, 7, 1, 8, 2],
                 DecodingConfig(max_new_tokens=MAX_NEW_TOKENS, eos_token_id=14, top_k=12, top_p=0.95,
                                allowed_token_ids=[t for t in range(32) if t not in (0, 5, 9)])),
    ]


def temperature_seeds() -> Iterator[tuple[str, float, int]]:
    """Greedy once (the seed does not matter), sampling with every seed."""
    yield "greedy", 0.0, 0
    for seed in SEEDS:
        yield f"t{SAMPLING_TEMPERATURE}/seed{seed}", SAMPLING_TEMPERATURE, seed


def tiny_cases() -> Iterator[tuple[str, Case]]:
    for pair in tiny_pairs():
        prefix = f"tiny/{pair.name}"
        yield f"{prefix}/models", {"target_sha256": weights_sha256(pair.target),
                                   "draft_sha256": weights_sha256(pair.draft), "prompt": pair.prompt}
        for cache, static in CACHES.items():
            for sampling, temperature, seed in temperature_seeds():
                config = pair.base.with_(temperature=temperature, seed=seed)
                result = autoregressive_generate(pair.target, pair.input_ids, config, static_cache=static)
                yield f"{prefix}/{cache}/ar/{sampling}", generation_case(result)
                for rule_name, rule_overrides in RULE_SETTINGS.items():
                    for draft_name, draft_overrides in DRAFT_SETTINGS.items():
                        config = pair.base.with_(temperature=temperature, seed=seed, **rule_overrides,
                                                 **draft_overrides)
                        result = speculative_generate(pair.target, pair.draft, pair.input_ids, config,
                                                      static_cache=static, rule=tiny_rule(pair, config))
                        yield f"{prefix}/{cache}/spec/{rule_name}/{draft_name}/{sampling}", generation_case(result)
            # The rule built inside speculative_generate from the config (no `rule=`).
            for rule_name in ("ssd_b0.3", "pcg"):
                config = pair.base.with_(temperature=SAMPLING_TEMPERATURE, seed=0, **RULE_SETTINGS[rule_name])
                result = speculative_generate(pair.target, pair.draft, pair.input_ids, config, static_cache=static)
                yield f"{prefix}/{cache}/spec_default_rule/{rule_name}/k4/seed0", generation_case(result)


def tiny_rule(pair: TinyPair, config: DecodingConfig) -> Any:
    """The rule `config` names; pcg groups tokens by the target's input embeddings."""
    if config.acceptance == "pcg":
        return make_rule(config, embeddings=pair.target.get_input_embeddings().weight.detach())
    return make_rule(config)


# --- the embedded voice --------------------------------------------------------------------------------

VOICE_TEXTS = ("Hello there.", "The weather is nice today. Could you call me back?", "It costs $5, not 10.")
VOICE_SEED = 7
#: Texts also decoded with transformers' forward (slow on the 12-layer target): the one that splits into two chunks.
DYNAMIC_CACHE_TEXTS = (1,)


@contextlib.contextmanager
def static_cache_env(static: bool) -> Iterator[None]:
    """Synthesizer.synthesize has no cache switch: the environment variable is read at call time."""
    old = os.environ.get(STATIC_CACHE_ENV)
    os.environ[STATIC_CACHE_ENV] = "1" if static else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[STATIC_CACHE_ENV]
        else:
            os.environ[STATIC_CACHE_ENV] = old


def voice_settings(drafts: list[str]) -> Iterator[tuple[str, str, str | None, dict[str, Any]]]:
    """(label, mode, draft, config overrides): AR, every draft at beta 0 and 0.2, and a few rules and K choices."""
    yield "ar", "ar", None, {}
    for draft in drafts:
        for beta in (0.0, 0.2):
            yield f"spec/{draft}/ssd_b{beta}", "speculative", draft, {"acceptance": "ssd", "beta": beta}
    first = drafts[0]
    yield f"spec/{first}/exact", "speculative", first, {"acceptance": "exact"}
    yield f"spec/{first}/topk3", "speculative", first, {"acceptance": "topk", "topk_tolerance": 3}
    yield f"spec/{first}/pcg", "speculative", first, {"acceptance": "pcg", "pcg_theta": 0.9}
    for draft in drafts:
        yield f"spec/{draft}/adaptive", "speculative", draft, {"draft_len": 6, "adaptive_draft_len": True}


def voice_cases() -> Iterator[tuple[str, Case]]:
    synth = load_synthesizer(device="cpu")
    drafts = sorted(synth.drafts)
    yield "voice/meta", {"drafts": drafts, "default_draft": synth.draft_name,
                         "target_sha256": weights_sha256(synth.target), "config": repr(synth.config())}
    for cache, static in CACHES.items():
        with static_cache_env(static):
            for text_index, text in enumerate(VOICE_TEXTS):
                if not static and text_index not in DYNAMIC_CACHE_TEXTS:
                    continue
                for label, mode, draft, overrides in voice_settings(drafts):
                    config = synth.config(seed=VOICE_SEED, **overrides)
                    out = synth.synthesize(text, mode=mode, config=config, draft=draft)
                    yield f"voice/{cache}/text{text_index}/{label}", synthesis_case(out)


def app_cases() -> Iterator[tuple[str, Case]]:
    """The app's own path for one click (load, checks, seed, config, draft, AR then speculative), with
    adaptive K off: measured costs only steer K when it is on, and timings must not change tokens."""
    try:
        from ssd_demo.app.compare import Request, compare
    except ImportError:  # the layout before the app had its own package
        from ssd_demo.app_logic import Request, compare
    for text_index, text in enumerate(VOICE_TEXTS):
        for draft in (None, "heads"):
            request = Request(text=text, preset="embedded", draft=draft, seed=VOICE_SEED, adaptive_draft_len=False)
            comparison = compare(request)
            label = f"app/text{text_index}/{draft or 'default'}"
            yield f"{label}/ar", synthesis_case(comparison.ar)
            yield f"{label}/speculative", synthesis_case(comparison.spec)


def synthesis_case(out: Any) -> Case:
    """A SynthesisResult: audio hash and length, and each chunk's tokens and rounds."""
    audio = np.ascontiguousarray(out.audio, dtype=np.float32)
    return {
        "text": out.text,
        "mode": out.mode,
        "sample_rate": out.sample_rate,
        "samples": int(audio.shape[0]),
        "audio_sha256": hashlib.sha256(audio.tobytes()).hexdigest(),
        "config": repr(out.config),
        "chunks": [{"text": chunk.text, "seed": chunk.seed, "start_sample": chunk.start_sample,
                    "end_sample": chunk.end_sample, "config": repr(chunk.config),
                    **generation_case(chunk.generation)} for chunk in out.chunks],
        "combined": generation_case(out.generation),
    }


# --- records ---------------------------------------------------------------------------------------------


def generation_case(result: Any) -> Case:
    """Tokens, per-round records and statistics of a GenerationResult, timings left out."""
    return {
        "tokens": list(result.tokens),
        "stats": {name: getattr(result.stats, name) for name in STATS_FIELDS},
        "rounds": [{name: getattr(step, name) for name in ROUND_FIELDS} for step in result.steps],
    }


def collect() -> dict[str, Case]:
    """Every case, by name, in plain JSON types."""
    cases: dict[str, Case] = {}
    for source in (tiny_cases, voice_cases, app_cases):
        started = time.perf_counter()
        for name, case in source():
            if name in cases:
                raise RuntimeError(f"duplicate case name {name}")
            cases[name] = json.loads(json.dumps(case))  # plain JSON types (tuples -> lists) for comparison
        print(f"{source.__name__}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return cases


def meta() -> dict[str, str]:
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "matmul": os.environ["SSD_DEMO_MATMUL"], "threads": str(torch.get_num_threads())}


def dump(path: str) -> int:
    if IMPORT_ERROR is not None:
        print("cannot import the decoders: run with PYTHONPATH set to the checkout under test", file=sys.stderr)
        raise IMPORT_ERROR
    torch.set_num_threads(1)
    started = time.perf_counter()
    cases = collect()
    with open(path, "w") as handle:
        json.dump({"meta": meta(), "cases": cases}, handle, indent=1)
    print(f"wrote {len(cases)} cases to {path} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


# --- comparison ------------------------------------------------------------------------------------------


MISSING = "<missing>"


def flatten(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(path, leaf value) pairs of nested dicts and lists; a list also gives its length."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        yield f"{prefix}.len", len(value)
        for index, item in enumerate(value):
            yield from flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def short(value: Any, limit: int = 100) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def case_differences(case_a: Any, case_b: Any) -> list[tuple[str, Any, Any]]:
    """(key, value in A, value in B) for every leaf value that differs between two cases."""
    flat_a, flat_b = dict(flatten(case_a, "")), dict(flatten(case_b, ""))
    keys = dict.fromkeys([*flat_a, *flat_b])
    return [(key, flat_a.get(key, MISSING), flat_b.get(key, MISSING)) for key in keys
            if flat_a.get(key, MISSING) != flat_b.get(key, MISSING)]


def compare(path_a: str, path_b: str, cases_shown: int = 10, keys_per_case: int = 3) -> int:
    """Print the first differing keys of two dumps; 0 if they are identical, 1 if not."""
    with open(path_a) as handle:
        a = json.load(handle)
    with open(path_b) as handle:
        b = json.load(handle)
    if a["meta"] != b["meta"]:
        print(f"note: the environments differ: {a['meta']} vs {b['meta']}")
    names = list(dict.fromkeys([*a["cases"], *b["cases"]]))
    differing = {name: found for name in names
                 if (found := case_differences(a["cases"].get(name, MISSING), b["cases"].get(name, MISSING)))}
    if not differing:
        print(f"identical: {len(names)} cases")
        return 0
    print(f"DIFFERENT: {len(differing)} of {len(names)} cases differ; the first ones:")
    for name, found in list(differing.items())[:cases_shown]:
        print(f"  {name}  ({len(found)} values)")
        for key, value_a, value_b in found[:keys_per_case]:
            print(f"    {key or '(case)'}: {short(value_a)} != {short(value_b)}")
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", metavar="FILE.json", help="write the dump here")
    group.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="compare two dumps")
    args = parser.parse_args()
    return dump(args.out) if args.out else compare(*args.compare)


if __name__ == "__main__":
    sys.exit(main())
