"""A vLLM engine in a process of its own, driven over stdin/stdout with one JSON object per line.

    python -m ssd_vllm_plugin.worker '{"target": DIR, "draft": DIR or null, "draft_len": 4, "dtype": "float32",
                                       "max_model_len": n, "max_num_seqs": n, "gpu_memory_utilization": f or null,
                                       "eager": true}'

It answers {"ready": true, "vllm": version, "startup_s": s} once the engine is up, then one line per request:
  {"op": "generate", "prompts": [[ids...], ...], "max_tokens": n or [n, ...], "temperature": t, "top_p": p,
   "top_k": k, "seed": s, "stop_token_ids": [...], "allowed_token_ids": [...] or null, "ignore_eos": false}
  -> {"outputs": [{"tokens": [...], "finish_reason": "stop"|"length", "latency_s": s}], "wall_s": s,
      "spec": {"drafts": n, "draft_tokens": n, "accepted_tokens": n}}
  {"op": "quit"} ends it. A failed request answers {"error": message}; the worker keeps serving.
All prompts of one request are queued at once, so vLLM batches them continuously; latency counts from then.
Request i is seeded with seed + i. Only this module's JSON goes to stdout (vLLM's logs go to stderr).
The caller (the ssd_demo library) gives every option and request field above: the decoding defaults are the
library's (its config.SETTINGS), and this worker holds none of its own; only the engine's own seed is 0 unless
given. draft_len is the library's name for what vLLM calls num_speculative_tokens.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _claim_stdout():
    """A private copy of stdout for the protocol; fd 1 (inherited by vLLM's engine process) becomes stderr."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


def build_engine(options: dict):
    from vllm import LLM

    kwargs = dict(model=options["target"], dtype=options["dtype"], max_model_len=int(options["max_model_len"]),
                  enforce_eager=options["eager"], seed=int(options.get("seed", 0)), disable_log_stats=False,
                  skip_tokenizer_init=True, max_num_seqs=int(options["max_num_seqs"]))
    if options.get("gpu_memory_utilization"):
        kwargs["gpu_memory_utilization"] = float(options["gpu_memory_utilization"])
    if options.get("draft"):
        # probabilistic: the draft samples with temperature and hands its distributions to the verify step,
        # as speculative sampling (and the tolerance rule) assume; vLLM's default drafts greedily.
        kwargs["speculative_config"] = {"method": "draft_model", "model": options["draft"],
                                        "num_speculative_tokens": int(options["draft_len"]),
                                        "draft_sample_method": "probabilistic"}
    return LLM(**kwargs)


def spec_counters(llm) -> dict:
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}
    counts = dict.fromkeys(names.values(), 0)
    for metric in llm.get_metrics():
        key = names.get(metric.name)
        if key is not None:
            counts[key] += int(getattr(metric, "value", 0))
    return counts


def generate(llm, request: dict) -> dict:
    from vllm import SamplingParams

    prompts = request["prompts"]
    lengths = request["max_tokens"]
    lengths = lengths if isinstance(lengths, list) else [lengths] * len(prompts)
    seed = int(request["seed"])
    before = spec_counters(llm)
    engine = llm.llm_engine
    started = time.perf_counter()
    index_of = {}
    for index, (prompt, length) in enumerate(zip(prompts, lengths)):
        params = SamplingParams(max_tokens=int(length), temperature=float(request["temperature"]),
                                top_p=float(request["top_p"]), top_k=int(request["top_k"]),
                                seed=seed + index, stop_token_ids=list(request["stop_token_ids"] or []),
                                allowed_token_ids=request["allowed_token_ids"],
                                ignore_eos=bool(request.get("ignore_eos", False)), detokenize=False)
        request_id = engine.add_request(str(index), {"prompt_token_ids": list(prompt)}, params)
        index_of[request_id if isinstance(request_id, str) else str(index)] = index
    outputs: list = [None] * len(prompts)
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                index = index_of.get(output.request_id, None)
                index = int(output.request_id) if index is None else index
                completion = output.outputs[0]
                outputs[index] = {"tokens": list(completion.token_ids), "finish_reason": completion.finish_reason,
                                  "latency_s": time.perf_counter() - started}
    wall = time.perf_counter() - started
    after = spec_counters(llm)
    return {"outputs": outputs, "wall_s": wall, "spec": {key: after[key] - before[key] for key in after}}


def main() -> int:
    out = _claim_stdout()
    options = json.loads(sys.argv[1])
    started = time.perf_counter()
    try:
        llm = build_engine(options)
    except Exception as error:  # the library reports it as one line
        out.write(json.dumps({"error": f"{type(error).__name__}: {error}"}) + "\n")
        return 1
    import vllm

    out.write(json.dumps({"ready": True, "vllm": vllm.__version__, "startup_s": time.perf_counter() - started}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        try:
            answer = generate(llm, request)
        except Exception as error:
            answer = {"error": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":  # vLLM spawns its engine process, which re-imports this module
    sys.exit(main())
