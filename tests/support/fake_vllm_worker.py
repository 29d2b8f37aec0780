"""The vLLM worker's protocol loop (ssd_vllm_plugin.worker.Server) around a stand-in engine, run as a process
by the library's VllmWorker in tests that have no vLLM (`stand_in_python` writes the interpreter it is started
with, so SSD_DEMO_VLLM_PYTHON can name it).

The stand-in adds one token per step to every unfinished request (token = prompt's last id + step), sleeping
`step_s` per step, so requests from several callers overlap; a prompt whose first id is 666 fails the step. As
its `drafts` count each prompt reports how many prompts the step that finished it held (what shows batching)."""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ssd_vllm_plugin import worker  # noqa: E402


class StandInEngine:
    def __init__(self, step_s: float) -> None:
        self.step_s, self.running, self.steps = step_s, {}, 0

    def add_request(self, request_id, prompt, params):
        self.running[request_id] = (prompt["prompt_token_ids"], params, [])
        return request_id

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def abort_request(self, request_ids) -> None:
        for request_id in request_ids:
            self.running.pop(request_id, None)

    def step(self):
        time.sleep(self.step_s)
        self.steps += 1
        outputs, together = [], len(self.running)
        shared = SimpleNamespace(to_dict=lambda: {"num_spec_steps": together, "num_draft_tokens": 0,
                                                  "num_accepted_draft_tokens": 0})
        for request_id, (prompt, params, tokens) in list(self.running.items()):
            if prompt[0] == 666:
                raise RuntimeError("the stand-in engine failed a step")
            tokens.append(prompt[-1] + len(tokens) + 1)
            finished = len(tokens) >= params["max_tokens"]
            if finished:
                del self.running[request_id]
            completion = SimpleNamespace(token_ids=list(tokens), finish_reason="length", spec_decode_metrics=shared)
            outputs.append(SimpleNamespace(request_id=request_id, finished=finished, outputs=[completion]))
        return outputs


def stand_in_python(folder: Path) -> Path:
    """An executable that takes the worker's command line (-m ssd_vllm_plugin.worker OPTIONS) and runs this."""
    script = Path(folder) / "python"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$3"\n')
    script.chmod(0o755)
    return script


def main() -> int:
    out = open(sys.stdout.fileno(), "w", buffering=1, closefd=False)  # line by line, as the real worker
    worker.sampling_params = lambda request: [{"max_tokens": n, "beta": b} for n, b in zip(
        worker.per_prompt(request["max_tokens"], len(request["prompts"])),
        worker.per_prompt(request.get("beta"), len(request["prompts"])))]
    out.write(json.dumps({"ready": True, "vllm": "stand-in", "startup_s": 0.0}) + "\n")
    out.flush()
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=worker.read_requests, args=(inbox,), daemon=True).start()
    llm = SimpleNamespace(llm_engine=StandInEngine(float(os.environ.get("STAND_IN_STEP_S", "0.01"))))
    worker.Server(llm, out).run(inbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
