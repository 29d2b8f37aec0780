"""A vLLM engine in a process of its own, driven over stdin/stdout with one JSON object per line.

    python -m ssd_vllm_plugin.worker '{"target": DIR, "draft": DIR or null, "draft_len": 4, "dtype": "float32",
                                       "max_model_len": n, "max_num_seqs": n, "gpu_memory_utilization": f or null,
                                       "eager": true}'

It answers {"ready": true, "vllm": version, "startup_s": s} once the engine is up. Then requests come at any
time, each with an id of the caller's choosing, and are answered as they finish (not in order), so requests
from many callers share the engine's batches (continuous batching):
  {"op": "generate", "id": "7", "prompts": [[ids...], ...], "max_tokens": n or [n, ...], "temperature": t,
   "top_p": p, "top_k": k, "seed": s, "stop_token_ids": [...], "allowed_token_ids": [...] or null,
   "ignore_eos": false, "beta": b or [b, ...]}
  -> {"id": "7", "outputs": [{"tokens": [...], "finish_reason": "stop"|"length", "latency_s": s,
                              "spec": {"drafts": n, "draft_tokens": n, "accepted_tokens": n}}], "wall_s": s,
      "spec": {"drafts": n, "draft_tokens": n, "accepted_tokens": n}}
  {"op": "abort", "id": "7"} -> {"id": "7", "aborted": true} (its prompts leave the engine's batch)
  {"op": "quit"} ends the worker. A failed request answers {"id": ..., "error": message}; the worker keeps serving.
One request's prompts are queued at once; each one's latency counts from then, and the answer comes when the
last one finishes. Prompt i is seeded with seed + i and verified with its own beta (SSD's tolerance, carried by
the plugin in SamplingParams.extra_args), so one engine serves every beta; "spec" counts each prompt's verify
steps, drafted and accepted tokens, and their sums. Only this module's JSON goes to stdout (vLLM's logs go to
stderr). The caller (the ssd_demo library) gives every option and request field above: the decoding defaults
are the library's (its config.SETTINGS), and this worker holds none of its own; only the engine's own seed is
0 unless given. draft_len is the library's name for what vLLM calls num_speculative_tokens.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field

SPEC_KEYS = ("drafts", "draft_tokens", "accepted_tokens")


def _claim_stdout():
    """A private copy of stdout for the protocol; fd 1 (inherited by vLLM's engine process) becomes stderr."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


def build_engine(options: dict):
    from vllm import LLM

    kwargs = dict(model=options["target"], dtype=options["dtype"], max_model_len=int(options["max_model_len"]),
                  enforce_eager=options["eager"], seed=int(options.get("seed", 0)), disable_log_stats=True,
                  skip_tokenizer_init=True, max_num_seqs=int(options["max_num_seqs"]))
    if options.get("gpu_memory_utilization"):
        kwargs["gpu_memory_utilization"] = float(options["gpu_memory_utilization"])
    if options.get("draft"):
        # probabilistic: the draft samples with temperature and hands its distributions to the verify step,
        # as speculative sampling (and the tolerance rule) assume; vLLM's default drafts greedily.
        kwargs["speculative_config"] = {"method": "draft_model", "model": options["draft"],
                                        "num_speculative_tokens": int(options["draft_len"]),
                                        "draft_sample_method": "probabilistic"}
        kwargs["per_request_spec_decode_metrics"] = "summary"  # each request's drafted and accepted tokens
    return LLM(**kwargs)


def request_spec(completion) -> dict:
    """One prompt's verify steps, drafted and accepted tokens (zeros without speculation)."""
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is None:
        return dict.fromkeys(SPEC_KEYS, 0)
    summary = metrics.to_dict()
    return {"drafts": summary["num_spec_steps"], "draft_tokens": summary["num_draft_tokens"],
            "accepted_tokens": summary["num_accepted_draft_tokens"]}


def per_prompt(value, count: int) -> list:
    return value if isinstance(value, list) else [value] * count


def sampling_params(request: dict) -> list:
    """One SamplingParams per prompt, every one checked (a bad beta is refused) before any is queued."""
    from ssd_vllm_plugin import BETA_ARGUMENT
    from vllm import SamplingParams

    count = len(request["prompts"])
    lengths, betas = per_prompt(request["max_tokens"], count), per_prompt(request.get("beta"), count)
    seed = int(request["seed"])
    return [SamplingParams(max_tokens=int(length), temperature=float(request["temperature"]),
                           top_p=float(request["top_p"]), top_k=int(request["top_k"]),
                           seed=seed + index, stop_token_ids=list(request["stop_token_ids"] or []),
                           allowed_token_ids=request["allowed_token_ids"],
                           ignore_eos=bool(request.get("ignore_eos", False)), detokenize=False,
                           extra_args=None if beta is None else {BETA_ARGUMENT: beta})
            for index, (length, beta) in enumerate(zip(lengths, betas))]


@dataclass
class Group:
    """One caller's request in flight: its prompts' engine ids, and their outputs as they finish."""

    id: str
    engine_ids: list[str]
    started: float = field(default_factory=time.perf_counter)
    outputs: list = field(default_factory=list)
    remaining: int = 0

    def answer(self) -> dict:
        totals = {key: sum(output["spec"][key] for output in self.outputs) for key in SPEC_KEYS}
        return {"id": self.id, "outputs": self.outputs, "wall_s": time.perf_counter() - self.started, "spec": totals}


class Server:
    """The engine loop: takes requests between steps, steps while any prompt is unfinished, answers each
    request when its last prompt finishes."""

    def __init__(self, llm, out) -> None:
        self.engine, self.out = llm.llm_engine, out
        self.groups: dict[str, Group] = {}
        self.owner: dict[str, tuple[str, int]] = {}  # engine request id -> (group id, prompt index)
        self.count = 0

    def write(self, answer: dict) -> None:
        self.out.write(json.dumps(answer) + "\n")

    def take(self, request: dict) -> None:
        op, group_id = request.get("op"), str(request.get("id", ""))
        if op == "abort":
            self.abort(group_id, {"id": group_id, "aborted": True})
        elif op != "generate":
            self.write({"id": group_id, "error": f"unknown op {op!r}"})
        elif group_id in self.groups:
            self.write({"id": group_id, "error": f"request id {group_id!r} is already in flight"})
        else:
            try:
                self.add(group_id, request)
            except Exception as error:
                self.abort(group_id, {"id": group_id, "error": f"{type(error).__name__}: {error}"})

    def add(self, group_id: str, request: dict) -> None:
        params = sampling_params(request)
        group = Group(group_id, [], remaining=len(params))
        group.outputs = [None] * len(params)
        self.groups[group_id] = group
        for index, (prompt, param) in enumerate(zip(request["prompts"], params)):
            self.count += 1
            engine_id = f"r{self.count}"
            # vLLM keeps this id for its outputs and aborts (it returns an internal one with a random suffix)
            self.engine.add_request(engine_id, {"prompt_token_ids": list(map(int, prompt))}, param)
            group.engine_ids.append(engine_id)
            self.owner[engine_id] = (group_id, index)
        if not params:
            self.finish(group)

    def abort(self, group_id: str, answer: dict) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            for engine_id in group.engine_ids:
                self.owner.pop(engine_id, None)
            if group.engine_ids:
                self.engine.abort_request(group.engine_ids)
        self.write(answer)

    def finish(self, group: Group) -> None:
        del self.groups[group.id]
        for engine_id in group.engine_ids:
            self.owner.pop(engine_id, None)
        self.write(group.answer())

    def step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as error:  # every request in flight failed with it; the engine goes on serving
            for group_id in list(self.groups):
                self.abort(group_id, {"id": group_id, "error": f"{type(error).__name__}: {error}"})
            return
        for output in outputs:
            if not output.finished or output.request_id not in self.owner:
                continue
            group_id, index = self.owner[output.request_id]
            group = self.groups[group_id]
            completion = output.outputs[0]
            group.outputs[index] = {"tokens": list(completion.token_ids), "finish_reason": completion.finish_reason,
                                    "latency_s": time.perf_counter() - group.started, "spec": request_spec(completion)}
            group.remaining -= 1
            if group.remaining == 0:
                self.finish(group)

    def run(self, inbox: "queue.Queue[dict | None]") -> None:
        while True:
            busy = self.engine.has_unfinished_requests()
            try:
                request = inbox.get(block=not busy)
            except queue.Empty:
                request = ...
            while request is not ...:
                if request is None or request.get("op") == "quit":
                    return
                self.take(request)
                try:
                    request = inbox.get_nowait()
                except queue.Empty:
                    request = ...
            if self.engine.has_unfinished_requests():
                self.step()


def read_requests(inbox: "queue.Queue[dict | None]") -> None:
    """stdin's lines into `inbox`; None at its end (the caller is gone)."""
    for line in sys.stdin:
        if line.strip():
            try:
                inbox.put(json.loads(line))
            except json.JSONDecodeError as error:
                inbox.put({"op": "invalid", "id": "", "error": str(error)})
    inbox.put(None)


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
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=read_requests, args=(inbox,), daemon=True).start()
    Server(llm, out).run(inbox)
    return 0


if __name__ == "__main__":  # vLLM spawns its engine process, which re-imports this module
    sys.exit(main())
