"""ssd_demo: speech speculative decoding, exact when asked, with a demo to hear it.

Public API:
    DecodingConfig, speculative_generate, autoregressive_generate,
    GenerationResult, RoundRecord, GenerationStats, predicted_speedup, compare_runs,
    Synthesizer, SynthesisResult, load_synthesizer, list_presets, load_preset, load_custom_pair,
    UserError and its kinds (InvalidSettingError, UnknownPresetError, TextError, ModelLoadError).
"""

from .config import DecodingConfig
from .presets import list_presets, load_custom_pair, load_preset
from .decoding import autoregressive_generate, speculative_generate
from .results import GenerationResult, GenerationStats, RoundRecord, SpeedupReport, compare_runs, predicted_speedup
from .errors import InvalidSettingError, ModelLoadError, TextError, UnknownPresetError, UserError
from .synthesis import Backend, SynthesisResult, Synthesizer, VoicePrompt

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


def __getattr__(name: str):
    # The embedded voice pulls in the codec and text front end; load it only when asked.
    if name == "load_synthesizer":
        from .backends.embedded import load_synthesizer

        return load_synthesizer
    raise AttributeError(f"module 'ssd_demo' has no attribute {name!r}")
