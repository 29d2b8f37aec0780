"""ssd_demo: speech speculative decoding, exact when asked, with a demo to hear it.

Public API:
    DecodingConfig, speculative_generate, autoregressive_generate,
    GenerationResult, RoundRecord, GenerationStats, predicted_speedup, compare_runs,
    Synthesizer, SynthesisResult, load_synthesizer, list_presets, load_preset, load_custom_pair,
    UserError and its kinds (InvalidSettingError, UnknownPresetError, TextError, ModelLoadError).
"""

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "DecodingConfig",
    "GenerationResult",
    "GenerationStats",
    "InvalidSettingError",
    "ModelLoadError",
    "RoundRecord",
    "SpeedupReport",
    "SynthesisResult",
    "Synthesizer",
    "TextError",
    "UnknownPresetError",
    "UserError",
    "VoicePrompt",
    "autoregressive_generate",
    "compare_runs",
    "list_presets",
    "load_custom_pair",
    "load_preset",
    "load_synthesizer",
    "predicted_speedup",
    "speculative_generate",
]


# Where each public name lives. Imported on first use (PEP 562), so that `python -m ssd_demo --help` and
# light modules (text, espeak) do not pay for torch and transformers.
_PUBLIC = {
    "DecodingConfig": "config",
    "list_presets": "backends.registry", "load_custom_pair": "backends.registry", "load_preset": "backends.registry",
    "autoregressive_generate": "engine", "speculative_generate": "engine",
    "GenerationResult": "engine.results", "GenerationStats": "engine.results", "RoundRecord": "engine.results",
    "SpeedupReport": "engine.results", "compare_runs": "engine.results", "predicted_speedup": "engine.results",
    "InvalidSettingError": "errors", "ModelLoadError": "errors", "TextError": "errors",
    "UnknownPresetError": "errors", "UserError": "errors",
    "Backend": "speech.synthesis", "SynthesisResult": "speech.synthesis", "Synthesizer": "speech.synthesis",
    "VoicePrompt": "speech.synthesis",
    "load_synthesizer": "backends.embedded",
}


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'ssd_demo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
