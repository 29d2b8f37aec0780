"""Which engine runs the speech LM: ours (in this process, one request at a time; the default) or vLLM (its own
process and environment, continuous batching, the path for batches and for GPU serving).

    synth = use_engine(load_preset("llasa-1b-3b"), "vllm")           # same Synthesizer API, LM on vLLM
    synth.render_batch(texts)                                        # vLLM only: all texts in one batch

`SSD_DEMO_ENGINE=vllm` chooses vLLM wherever the engine is not named explicitly (`engine_choice()`).
Without the vLLM environment everything runs on ours, and choosing vLLM is a clear `UserError`.
"""

from .choice import (ENGINE_VARIABLE, ENGINES, VLLM_BACKENDS, VllmUnavailableError, engine_choice, environment_engine,
                     use_engine, vllm_available)

__all__ = ["ENGINES", "ENGINE_VARIABLE", "VLLM_BACKENDS", "VllmUnavailableError", "engine_choice", "environment_engine",
           "use_engine", "vllm_available"]
