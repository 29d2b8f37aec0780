"""Running both decoders for one click: load the preset, check the request, warm up, time AR then SSD.

`compare` runs the target autoregressively and then speculatively on the same text and settings,
in the same process, after a one-off warm-up, and returns both `SynthesisResult`s with the speedup
report. On a ZeroGPU Space both timed runs happen inside one GPU allocation.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...engine.calibration import StepCosts, calibrated_costs, is_calibrated
from ...cancellation import StopCheck
from ...config import DecodingConfig
from ...errors import ModelLoadError
from ... import model_memory
from ...presets import MODEL_JOB_LOCK, Preset, get_preset, load_preset
from ...results import SpeedupReport, compare_runs
from ...cpu_threads import cpu_threads_for
from ...synthesis import SynthesisResult, Synthesizer, VoicePrompt
from .settings import Request, build_config, check_text, request_seed, resolve_draft, resolve_voice_prompt

#: progress(fraction in [0, 1], description); gr.Progress instances fit this shape.
ProgressFn = Callable[..., object]

WARM_UP_TEXT = "Warm up."


def preferred_device() -> str | None:
    """"cuda" when a GPU is visible (a Space, a workstation), else None (the loader's CPU default)."""
    return "cuda" if torch.cuda.is_available() else None


def load(preset_key: str, progress: ProgressFn | None = None, owner: str | None = None) -> tuple[Preset, Synthesizer]:
    """Load a preset (`owner`: the session whose custom pairs count), turning any failure into a
    ModelLoadError with a readable message."""
    preset = get_preset(preset_key, owner)  # KeyError names the available presets

    def report(fraction: float, message: str) -> None:
        # Loading is the first tenth of a run's progress bar.
        if progress is not None:
            progress(0.1 * min(max(float(fraction), 0.0), 1.0), desc=f"Loading the model: {message}")

    try:
        return preset, load_preset(preset_key, device=preferred_device(), progress=report, owner=owner)
    except Exception as error:  # noqa: BLE001 - any loader failure is reported the same way
        hint = " (it needs files from the Hugging Face Hub; check the network or the local cache)" if preset.needs_download else ""
        raise ModelLoadError(f"Could not load the model preset '{preset.label}'{hint}: {error}") from error


@dataclass
class Comparison:
    """One click's worth of results."""

    preset: str
    draft: str
    seed: int
    config: DecodingConfig
    ar: SynthesisResult
    spec: SynthesisResult
    report: SpeedupReport
    costs: StepCosts | None = None  # this machine's measured draft and verify costs
    requested_draft: str | None = None  # what the request named, when the preset has no such draft
    left_out: str = ""  # characters of the text the voice does not speak (e.g. another script)
    token_label: Callable[[int], str] = str  # the backend's names for token ids


_warmed: "weakref.WeakKeyDictionary[Synthesizer, set[str]]" = weakref.WeakKeyDictionary()
_warm_lock = threading.Lock()


def warm_up(synthesizer: Synthesizer, draft: str) -> bool:
    """Run both decoders once on a short text so the timed runs skip first-call costs.

    Done once per loaded synthesizer and draft (kernels, allocator pools and lazy
    imports settle on the first call). Returns True when it ran.
    """
    with _warm_lock:
        done = _warmed.setdefault(synthesizer, set())
        if draft in done:
            return False
        config = synthesizer.config(max_new_tokens=8, seed=0)
        synthesizer.synthesize(WARM_UP_TEXT, mode="ar", config=config)
        synthesizer.synthesize(WARM_UP_TEXT, mode="speculative", config=config, draft=draft)
        done.add(draft)
        return True


def _zerogpu_decorator() -> Callable | None:
    """`spaces.GPU` on a Hugging Face ZeroGPU Space, None everywhere else."""
    try:
        import spaces  # type: ignore[import-not-found]
    except ImportError:
        return None
    return spaces.GPU


_ZEROGPU = _zerogpu_decorator()


def _no_progress(*args, **kwargs) -> None:
    return None


def _run_both(
    preset_key: str, text: str, config: DecodingConfig, draft: str, progress: ProgressFn | None = None,
    voice_prompt: VoicePrompt | None = None, should_stop: StopCheck | None = None, owner: str | None = None,
) -> tuple[SynthesisResult, SynthesisResult, StepCosts]:
    """Warm up, then AR and speculative on the same text and settings, back to back.

    Both timed runs happen inside this one call, so on ZeroGPU they share one GPU
    allocation and are timed under the same conditions. Takes and returns plain,
    picklable data (ZeroGPU runs it in a worker process) and looks the resident
    models up by preset key.
    """
    progress = progress or _no_progress
    synthesizer = load_preset(preset_key, device=preferred_device(), owner=owner)
    model_memory.check_gpu_memory(synthesizer)  # on ZeroGPU the only place where the GPU can be measured
    if synthesizer.device.type == "cpu":
        # Process-wide, but safe: model jobs run one at a time (see the UI's queue).
        torch.set_num_threads(cpu_threads_for(synthesizer))
    progress(0.1, desc="Warming up the models (first run only)")
    warm_up(synthesizer, draft)
    # This machine's costs (measured once per pair): shown next to the measured speedup, and what
    # adaptive K decides with, so that it drafts nothing where drafting does not pay.
    if not is_calibrated(synthesizer.target, synthesizer.drafts[draft]):
        progress(0.2, desc="Measuring this machine's draft and verify costs (first run only; up to half a minute on a busy CPU)")
    costs = calibrated_costs(synthesizer.target, synthesizer.drafts[draft])
    if config.adaptive_draft_len and config.verify_costs is None:
        config = config.with_(cost_ratio=costs.draft, verify_costs=costs.verify)
    progress(0.25, desc="Autoregressive decoding (one target call per token)")
    ar = synthesizer.synthesize(text, mode="ar", config=config, voice_prompt=voice_prompt, should_stop=should_stop)
    progress(0.6, desc=f"Speculative decoding (draft '{draft}', K = {config.draft_len})")
    spec = synthesizer.synthesize(text, mode="speculative", config=config, draft=draft, voice_prompt=voice_prompt,
                                  should_stop=should_stop)
    return ar, spec, costs


def gpu_seconds(preset_key: str, text: str, config: DecodingConfig, draft: str, progress=None, voice_prompt=None,
                owner=None) -> int:
    """ZeroGPU time to ask for: warm-up + AR + speculative grow with the length limit
    (the default 60 s would cut off long Llasa-8B runs)."""
    return int(min(300, 60 + 0.1 * config.max_new_tokens))


if _ZEROGPU is not None:
    _run_both_on_gpu = _ZEROGPU(duration=gpu_seconds)(_run_both)

    def run_both(preset_key, text, config, draft, progress=None, voice_prompt=None, should_stop=None, owner=None):
        # Progress callbacks and stop checks cannot cross into the GPU worker process; report the
        # stage before it (a stopped ZeroGPU run ends when its GPU allocation does).
        (progress or _no_progress)(0.2, desc="Decoding on the GPU (AR, then speculative)")
        return _run_both_on_gpu(preset_key, text, config, draft, voice_prompt=voice_prompt, owner=owner)

else:
    run_both = _run_both


def decodes_in_gpu_worker() -> bool:
    """Whether model work runs in ZeroGPU's worker process (where nothing can stream out of a run)."""
    return run_both is not _run_both


def compare(request: Request, progress: ProgressFn | None = None, should_stop: StopCheck | None = None) -> Comparison:
    """Load the preset, validate everything, and run both decoders.

    Raises a `UserError` for what the user can change: TextError (bad text), InvalidSettingError
    (bad settings), UnknownPresetError or ModelLoadError; the UI shows each as a message. `should_stop`
    is asked between chunks and rounds of both runs: `Cancelled` ends the work within one round.
    """
    progress = progress or _no_progress
    progress(0.0, desc="Waiting for the model" if MODEL_JOB_LOCK.locked() else "Loading the model")
    with MODEL_JOB_LOCK:
        progress(0.0, desc="Loading the model")
        preset, synthesizer = load(request.preset, progress, owner=request.owner)
        text = check_text(synthesizer, request.text)
        seed = request_seed(synthesizer, request)
        config = build_config(synthesizer, request, seed)
        draft = resolve_draft(preset, synthesizer, request.draft)
        voice_prompt = resolve_voice_prompt(synthesizer, request.voice_prompt)
        ar, spec, costs = run_both(preset.key, text, config, draft, progress, voice_prompt=voice_prompt,
                                   should_stop=should_stop, owner=request.owner)
    return Comparison(
        preset=preset.key,
        draft=draft,
        seed=seed,
        # Adaptive K decided with this machine's costs: report them with the settings.
        config=config.with_(cost_ratio=spec.config.cost_ratio, verify_costs=spec.config.verify_costs),
        ar=ar,
        spec=spec,
        report=compare_runs(ar.generation, spec.generation),
        token_label=token_label_for(synthesizer),
        costs=costs,
        requested_draft=request.draft if request.draft and request.draft != draft else None,
        left_out=synthesizer.left_out(text),
    )


def token_label_for(synthesizer: Synthesizer) -> Callable[[int], str]:
    """The backend's own token names when it has them (e.g. codec code numbers), else the ids."""
    label = getattr(synthesizer.backend, "token_label", None)
    return label if callable(label) else str
