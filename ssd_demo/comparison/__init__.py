"""Comparing autoregressive and speculative decoding of one text, as one pipeline for every front end (the
web app's `/synthesize`, `/race` and ZeroGPU path, and `python -m ssd_demo compare`). No Gradio inside:

    request   the `Request` of one comparison and its checks (text, seed, settings, draft, voice prompt)
    models    load a preset on the preferred device, warm its decoders up once, the backend's token names
    startup   the same steps and the cost measurement for the default preset, in a thread started with the app
    slow_motion  both lanes' measured timelines stretched by one factor (the race's slow-motion replay)
    pipeline  `prepare` a request once, `run` both decoders (streamed to a `LaneSink`), `compare` is
              both; the `Comparison` they return; ZeroGPU's one-call `decode_job`
    replay    lanes decoded one after the other, told to a `LaneSink` on one clock at their measured pace
"""

from .models import ProgressFn, load, preferred_device, token_label_for, warm_up
from .pipeline import (LANES, Comparison, Job, LaneSink, Prepared, compare, decode_both, decode_job,
    decodes_in_gpu_worker, get_ready, model_turn, prepare, ready_machine, replay_recorded, run)
from .replay import Recording, recording_of, replay_at_pace, replayed_pieces
from .startup import Readiness, get_ready_in_background, startup_readiness
from .request import (RANDOMIZE_SEED, REQUEST_SETTINGS, REQUEST_SPECS, Request, VoiceSource, build_config, check_text,
    request_seed, resolve_draft, resolve_voice_prompt)

__all__ = [
    "LANES", "RANDOMIZE_SEED", "REQUEST_SETTINGS", "REQUEST_SPECS",
    "Comparison", "Job", "LaneSink", "Prepared", "ProgressFn", "Request", "VoiceSource",
    "build_config", "check_text", "compare", "decode_both", "decode_job", "decodes_in_gpu_worker",
    "Readiness", "get_ready", "get_ready_in_background", "ready_machine", "startup_readiness", "load", "model_turn", "preferred_device", "prepare", "replay_recorded", "Recording", "recording_of", "replay_at_pace", "replayed_pieces", "request_seed",
    "resolve_draft", "resolve_voice_prompt", "run", "token_label_for", "warm_up",
]
