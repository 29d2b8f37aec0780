"""What the web app does, as plain functions with no Gradio inside.

`compare` runs the target autoregressively and then speculatively on the same text
and settings, in the same process, after a one-off warm-up, and returns both
`SynthesisResult`s with the speedup report. The other functions turn that into
what the page shows: a statistics table, the per-round token view, named int16
WAV files and the charts. The Gradio layer (`ssd_demo.ui`) only wires these to
components and turns the errors below into messages.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile

from . import charts
from .config import DecodingConfig
from .errors import InvalidSettingError, ModelLoadError, TextError, UserError
from .presets import MODEL_JOB_LOCK, Preset, get_preset, load_preset
from .results import GenerationResult, SpeedupReport, compare_runs
from .synthesis import SynthesisResult, Synthesizer, VoicePrompt

#: progress(fraction in [0, 1], description); gr.Progress instances fit this shape.
ProgressFn = Callable[..., object]

EXAMPLE_TEXTS = (
    "Speculative decoding lets a small draft model guess ahead while the large model checks its work.",
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A tolerance of zero keeps the output exactly the same as the target model's.",
)

MAX_EXAMPLES = 6


def example_texts() -> list[str]:
    """Example sentences for the page: the embedded voice's own (held-out) examples when shipped."""
    texts = list(EXAMPLE_TEXTS[:1])
    try:
        from .backends.embedded import DEFAULT_PATH

        shipped = (DEFAULT_PATH / "examples.txt").read_text(encoding="utf-8").splitlines()
    except (ImportError, OSError):
        shipped = []
    texts += [line.strip() for line in shipped if line.strip()]
    if len(texts) == 1:
        texts = list(EXAMPLE_TEXTS)
    return texts[:MAX_EXAMPLES]


WARM_UP_TEXT = "Warm up."
MAX_SEED = 2**31 - 1


# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """Everything the user chose on the page (one click = one request).

    Settings left as None take the preset's defaults (`Synthesizer.config()`).
    """

    text: str
    preset: str = "embedded"
    draft: str | None = None  # None or unknown: the preset's default draft
    draft_len: int | None = None
    beta: float | None = None
    acceptance: str | None = None
    topk_tolerance: int | None = None
    pcg_theta: float | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    randomize_seed: bool = False
    max_new_tokens: int | None = None
    voice_prompt: VoicePrompt | None = None  # a clip to imitate (backends that clone voices)


def voice_prompt_from_upload(audio, transcript: str | None) -> VoicePrompt | None:
    """gr.Audio's (sample_rate, samples) upload + its transcript -> a VoicePrompt (None when no clip)."""
    if audio is None:
        if transcript and transcript.strip():
            raise UserError("A voice-prompt transcript was given without a clip: upload the clip it belongs to.")
        return None
    rate, samples = audio
    if not transcript or not transcript.strip():
        raise UserError("A voice prompt needs its transcript: type exactly what is said in the clip.")
    samples = np.asarray(samples)
    if np.issubdtype(samples.dtype, np.integer):  # scale before averaging channels turns ints into floats
        samples = samples.astype(np.float32) / float(np.iinfo(samples.dtype).max + 1)
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    return VoicePrompt(audio=samples.astype(np.float32), sample_rate=int(rate), transcript=transcript.strip())


def resolve_seed(seed: float | int | None, randomize: bool) -> int:
    """The seed to use: a fresh random one when asked (or when none is given), else `seed`."""
    if randomize or seed is None or (isinstance(seed, float) and math.isnan(seed)):
        return secrets.randbelow(MAX_SEED + 1)
    if float(seed) != int(seed) or int(seed) < 0:
        raise InvalidSettingError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _as_int(name: str, value) -> int:
    """Sliders and number boxes may deliver floats; integral floats are fine, others are not."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}")
    return int(number)


_INT_SETTINGS = {"draft_len": "draft length K", "topk_tolerance": "top-k tolerance", "top_k": "top-k",
                 "max_new_tokens": "max length"}
_FLOAT_SETTINGS = ("beta", "pcg_theta", "temperature", "top_p")


def build_config(synthesizer: Synthesizer, request: Request, seed: int) -> DecodingConfig:
    """The preset's defaults with the user's choices on top; raises ValueError for bad values."""
    changes: dict[str, object] = {"seed": seed}
    for name, label in _INT_SETTINGS.items():
        if getattr(request, name) is not None:
            changes[name] = _as_int(label, getattr(request, name))
    for name in _FLOAT_SETTINGS:
        if getattr(request, name) is not None:
            try:
                changes[name] = float(getattr(request, name))
            except (TypeError, ValueError):
                raise InvalidSettingError(f"{name} must be a number, got {getattr(request, name)!r}") from None
    if request.acceptance is not None:
        changes["acceptance"] = str(request.acceptance)
    return synthesizer.config(**changes)


def resolve_draft(preset: Preset, synthesizer: Synthesizer, draft: str | None) -> str:
    """The requested draft if the preset has it, else the preset's default."""
    if draft and draft in synthesizer.drafts:
        return draft
    return preset.default_draft if preset.default_draft in synthesizer.drafts else synthesizer.draft_name


def check_text(synthesizer: Synthesizer, text: str | None) -> str:
    """Reject empty or over-long text before any model runs (TextError with a readable message)."""
    text = (text or "").strip()
    if not text:
        raise TextError("Please type some text to synthesise.")
    limit = synthesizer.backend.max_text_chars
    if len(text) > limit:
        raise TextError(f"The text is {len(text)} characters long; this voice accepts at most {limit}.")
    # The backend's own checks (characters it cannot read, ...) before any model runs; a backend that
    # speaks long text in chunks checks the text as it will split it.
    split = getattr(synthesizer.backend, "split_text", None)
    for chunk in split(text) if split is not None else [text]:
        synthesizer.backend.prompt_ids(getattr(chunk, "text", chunk))
    return text


def preferred_device() -> str | None:
    """"cuda" when a GPU is visible (a Space, a workstation), else None (the loader's CPU default)."""
    import torch

    return "cuda" if torch.cuda.is_available() else None


def load(preset_key: str, progress: ProgressFn | None = None) -> tuple[Preset, Synthesizer]:
    """Load a preset, turning any failure into a ModelLoadError with a readable message."""
    preset = get_preset(preset_key)  # KeyError names the available presets

    def report(fraction: float, message: str) -> None:
        # Loading is the first tenth of a run's progress bar.
        if progress is not None:
            progress(0.1 * min(max(float(fraction), 0.0), 1.0), desc=f"Loading the model: {message}")

    try:
        return preset, load_preset(preset_key, device=preferred_device(), progress=report)
    except Exception as error:  # noqa: BLE001 - any loader failure is reported the same way
        hint = " (it needs files from the Hugging Face Hub; check the network or the local cache)" if preset.needs_download else ""
        raise ModelLoadError(f"Could not load the model preset '{preset.label}'{hint}: {error}") from error


# ---------------------------------------------------------------------------
# Running both decoders
# ---------------------------------------------------------------------------


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


#: Below this many target parameters one torch thread is used: such models are bound by
#: per-call overhead, and a second thread only adds synchronisation (and, on a shared or
#: busy CPU, waits for a core another process holds: 10x slower was seen on 2 cores).
SMALL_MODEL_PARAMETERS = 100_000_000
_DEFAULT_THREADS = None


def cpu_threads_for(synthesizer: Synthesizer) -> int:
    """Torch CPU threads for this model: $SSD_TORCH_THREADS, else 1 for small models, else torch's default."""
    import torch

    global _DEFAULT_THREADS
    if _DEFAULT_THREADS is None:
        _DEFAULT_THREADS = torch.get_num_threads()
    override = os.environ.get("SSD_TORCH_THREADS", "").strip()
    if override:
        return max(1, int(override))
    parameters = sum(p.numel() for p in synthesizer.target.parameters())
    return 1 if parameters < SMALL_MODEL_PARAMETERS else _DEFAULT_THREADS


def _run_both(
    preset_key: str, text: str, config: DecodingConfig, draft: str, progress: ProgressFn | None = None,
    voice_prompt: VoicePrompt | None = None,
) -> tuple[SynthesisResult, SynthesisResult]:
    """Warm up, then AR and speculative on the same text and settings, back to back.

    Both timed runs happen inside this one call, so on ZeroGPU they share one GPU
    allocation and are timed under the same conditions. Takes and returns plain,
    picklable data (ZeroGPU runs it in a worker process) and looks the resident
    models up by preset key.
    """
    from .hub import check_gpu_memory

    progress = progress or _no_progress
    synthesizer = load_preset(preset_key, device=preferred_device())
    check_gpu_memory(synthesizer)  # on ZeroGPU the only place where the GPU can be measured
    if synthesizer.device.type == "cpu":
        import torch

        # Process-wide, but safe: model jobs run one at a time (see the UI's queue).
        torch.set_num_threads(cpu_threads_for(synthesizer))
    progress(0.1, desc="Warming up the models (first run only)")
    warm_up(synthesizer, draft)
    progress(0.25, desc="Autoregressive decoding (one target call per token)")
    ar = synthesizer.synthesize(text, mode="ar", config=config, voice_prompt=voice_prompt)
    progress(0.6, desc=f"Speculative decoding (draft '{draft}', K = {config.draft_len})")
    spec = synthesizer.synthesize(text, mode="speculative", config=config, draft=draft, voice_prompt=voice_prompt)
    return ar, spec


def gpu_seconds(preset_key: str, text: str, config: DecodingConfig, draft: str, progress=None, voice_prompt=None) -> int:
    """ZeroGPU time to ask for: warm-up + AR + speculative grow with the length limit
    (the default 60 s would cut off long Llasa-8B runs)."""
    return int(min(300, 60 + 0.1 * config.max_new_tokens))


if _ZEROGPU is not None:
    _run_both_on_gpu = _ZEROGPU(duration=gpu_seconds)(_run_both)

    def run_both(preset_key, text, config, draft, progress=None, voice_prompt=None):
        # Progress callbacks cannot cross into the GPU worker; report the stage before it.
        (progress or _no_progress)(0.2, desc="Decoding on the GPU (AR, then speculative)")
        return _run_both_on_gpu(preset_key, text, config, draft, voice_prompt=voice_prompt)

else:
    run_both = _run_both


def compare(request: Request, progress: ProgressFn | None = None) -> Comparison:
    """Load the preset, validate everything, and run both decoders.

    Raises a `UserError` for what the user can change: TextError (bad text), InvalidSettingError
    (bad settings), UnknownPresetError or ModelLoadError; the UI shows each as a message.
    """
    progress = progress or _no_progress
    progress(0.0, desc="Waiting for the model" if MODEL_JOB_LOCK.locked() else "Loading the model")
    with MODEL_JOB_LOCK:
        progress(0.0, desc="Loading the model")
        preset, synthesizer = load(request.preset, progress)
        text = check_text(synthesizer, request.text)
        default_seed = synthesizer.config().seed
        seed = resolve_seed(request.seed if request.seed is not None else default_seed, request.randomize_seed)
        config = build_config(synthesizer, request, seed)
        draft = resolve_draft(preset, synthesizer, request.draft)
        ar, spec = run_both(preset.key, text, config, draft, progress, voice_prompt=request.voice_prompt)
    return Comparison(
        preset=preset.key,
        draft=draft,
        seed=seed,
        config=config,
        ar=ar,
        spec=spec,
        report=compare_runs(ar.generation, spec.generation),
        token_label=token_label_for(synthesizer),
    )


# ---------------------------------------------------------------------------
# What the page shows
# ---------------------------------------------------------------------------


def _fmt(value: float, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}{unit}"


def end_to_end_speedup(comparison: Comparison) -> float:
    """LM + codec seconds per second of audio, AR over speculative: the two runs sample different
    lengths, so a raw wall-time ratio would credit whichever happened to say less."""
    ar_rtf, spec_rtf = comparison.ar.real_time_factor, comparison.spec.real_time_factor
    return ar_rtf / spec_rtf if spec_rtf > 0 and math.isfinite(spec_rtf) and math.isfinite(ar_rtf) else float("nan")


def stats_rows(comparison: Comparison) -> list[tuple[str, str, str]]:
    """(metric, autoregressive, speculative) rows for the side-by-side table."""
    ar, spec, report = comparison.ar, comparison.spec, comparison.report
    a, s = ar.generation.stats, spec.generation.stats
    end_to_end = end_to_end_speedup(comparison)
    return [
        ("Audio duration", _fmt(ar.duration_seconds, 2, " s"), _fmt(spec.duration_seconds, 2, " s")),
        ("Wall time (LM + codec)", _fmt(ar.total_seconds, 3, " s"), _fmt(spec.total_seconds, 3, " s")),
        ("  of which LM", _fmt(ar.lm_seconds, 3, " s"), _fmt(spec.lm_seconds, 3, " s")),
        ("  of which codec", _fmt(ar.codec_seconds, 3, " s"), _fmt(spec.codec_seconds, 3, " s")),
        ("Text chunks (decoded one after another)", str(max(len(ar.chunks), 1)), str(max(len(spec.chunks), 1))),
        ("Tokens sampled", _sampled(a), _sampled(s)),
        ("Tokens / s (LM)", _fmt(a.tokens_per_second, 1), _fmt(s.tokens_per_second, 1)),
        ("Real-time factor (lower is faster)", _fmt(ar.real_time_factor, 3), _fmt(spec.real_time_factor, 3)),
        ("Target calls", str(a.target_calls), str(s.target_calls)),
        ("Draft calls", "–", str(s.draft_calls)),
        ("Acceptance rate (accepted / drafted)", "–", _fmt(s.acceptance_rate * 100, 1, " %")),
        ("Mean accepted length per round", "–", f"{s.mean_accepted_length:.2f} of K = {s.draft_len}"),
        ("Tokens per target call", _fmt(a.mean_tokens_per_call, 2), _fmt(s.mean_tokens_per_call, 2)),
        ("Speedup, LM decoding per token (measured)", "1.00×", _fmt(report.measured, 2, "×")),
        ("Speedup, end to end (per second of audio)", "1.00×", _fmt(end_to_end, 2, "×")),
        ("Predicted speedup (α, c; verify = 1 step)", "–", _fmt(report.predicted, 2, "×")),
        ("Predicted speedup (α, c, measured verify cost)", "–", _fmt(report.predicted_strict, 2, "×")),
        ("α (expected per-token acceptance)", "–", _fmt(report.alpha, 3)),
        ("c (draft step / target step)", "–", _fmt(report.cost_ratio, 3)),
        ("Verify call / target step", "–", _fmt(report.verify_ratio, 2)),
        ("Stopped by", a.finish_reason, s.finish_reason),
    ]


def _sampled(stats) -> str:
    if stats.forced_tokens:
        return f"{stats.sampled_tokens} (+{stats.forced_tokens} inserted)"
    return str(stats.sampled_tokens)


def length_limit_note(comparison: Comparison) -> str | None:
    """A warning when a run stopped at the length limit rather than at its end token (audio may be cut)."""
    cut = [(name, result) for name, result in (("autoregressive", comparison.ar), ("speculative", comparison.spec))
           if result.generation.stats.finish_reason == "length"]
    if not cut:
        return None
    runs = " and ".join(f"the {name} run (limit {_tokens(result.config.max_new_tokens)})" for name, result in cut)
    return (f"**Stopped at the length limit:** {runs} ended before the model finished speaking, so the audio may "
            "be cut off. Shorten the text, or raise the max length if the model's context allows.")


def _tokens(count: int) -> str:
    return f"{count} token" if count == 1 else f"{count} tokens"


def stats_markdown(comparison: Comparison) -> str:
    lines = ["| | Autoregressive | Speculative |", "|---|---:|---:|"]
    lines += [f"| {name} | {ar} | {spec} |" for name, ar, spec in stats_rows(comparison)]
    config = comparison.config
    note = length_limit_note(comparison)
    if note:
        lines += ["", note]
    lines.append("")
    lines.append(
        f"Preset `{comparison.preset}`, draft `{comparison.draft}`, rule `{config.acceptance}`, "
        f"K = {config.draft_len}, β = {config.beta:g}{' (not used by exact)' if config.acceptance == 'exact' else ''}, "
        f"temperature {config.temperature:g}, "
        f"top-k {config.top_k}, top-p {config.top_p:g}, seed {comparison.seed}."
    )
    return "\n".join(lines)


def details(comparison: Comparison) -> dict:
    """Machine-readable summary (the API's JSON output)."""
    config = asdict(comparison.config)
    config.pop("allowed_token_ids", None)  # thousands of ids; not useful to a reader

    def run(result: SynthesisResult) -> dict:
        return {
            "stats": asdict(result.generation.stats),
            "tokens": list(result.generation.tokens),
            "duration_seconds": result.duration_seconds,
            "lm_seconds": result.lm_seconds,
            "codec_seconds": result.codec_seconds,
            "total_seconds": result.total_seconds,
            "real_time_factor": result.real_time_factor,
            "sample_rate": result.sample_rate,
            "chunks": [{"text": c.text, "seed": c.seed, "tokens": len(c.generation.tokens),
                        "finish_reason": c.generation.stats.finish_reason,
                        "start_seconds": c.start_sample / result.sample_rate,
                        "end_seconds": c.end_sample / result.sample_rate} for c in result.chunks],
        }

    report = comparison.report
    return {
        "text": comparison.ar.text,
        "preset": comparison.preset,
        "draft": comparison.draft,
        "seed": comparison.seed,
        "config": config,
        "autoregressive": run(comparison.ar),
        "speculative": run(comparison.spec),
        "speedup": {
            "measured": report.measured,
            "end_to_end": end_to_end_speedup(comparison) if math.isfinite(end_to_end_speedup(comparison)) else None,
            "predicted": report.predicted,
            "predicted_strict": report.predicted_strict,
            "alpha": report.alpha,
            "cost_ratio": report.cost_ratio,
            "verify_ratio": report.verify_ratio,
        },
    }


TOKEN_COLOURS = {
    "accepted": "#3aa655",
    "rejected": "#d9534f",
    "replacement": "#e8873a",
    "bonus": "#3b8fd9",
    "discarded": "#9a9a9a",
    "inserted": "#7b6fb0",  # put in by the decoder (the embedded voice's phonemes), never sampled
}


def token_view(
    generation: GenerationResult, label: Callable[[int], str] = str, eos_ids: tuple[int, ...] = ()
) -> list[tuple[str, str | None]]:
    """Every speculative round as highlighted (text, category) pairs, rounds separated by "|".

    accepted: drafted and kept; rejected: the first drafted token the target refused;
    replacement: the token sampled in its place; bonus: the extra token after a fully
    accepted block; discarded: drafted after a rejection (never checked); inserted: put in by
    the decoder's forced-token schedule (the embedded voice's phonemes), never sampled.
    """

    def name(token: int) -> str:
        return "END" if token in eos_ids else label(token)

    spans: list[tuple[str, str | None]] = []
    for index, step in enumerate(generation.steps):
        if index:
            spans.append((" | ", None))
        inserted = _inserted_after(step, step.accepted + 1)
        for position, token in enumerate(step.drafted[: step.accepted]):
            spans.append((name(token), "accepted"))
            spans += [(name(t), "inserted") for t in inserted[position]]
        tail = inserted[step.accepted]
        if step.next_kind == "replacement":
            spans.append((name(step.drafted[step.accepted]), "rejected"))
            spans.append(("→" + name(step.next_token), "replacement"))
            spans += [(name(t), "inserted") for t in tail]
            spans += [(name(token), "discarded") for token in step.drafted[step.accepted + 1 :]]
        elif step.next_kind == "bonus":
            spans.append(("+" + name(step.next_token), "bonus"))
            spans += [(name(t), "inserted") for t in tail]
        else:
            spans += [(name(token), "discarded") for token in step.drafted[step.accepted :]]
            if step.next_token is not None:  # e.g. an autoregressive step
                spans.append((name(step.next_token), None))
                spans += [(name(t), "inserted") for t in tail]
    return spans


def _inserted_after(step, length: int) -> list[list[int]]:
    """For each emitted token of a round, the tokens the decoder inserted right after it (padded to `length`)."""
    groups, index = [], 0
    for count in step.forced_counts:
        groups.append(step.committed[index + 1 : index + 1 + count])
        index += 1 + count
    return groups + [[] for _ in range(length - len(groups))]


def comparison_token_view(comparison: Comparison) -> list[tuple[str, str | None]]:
    return token_view(comparison.spec.generation, comparison.token_label, comparison.config.eos_ids)


def token_label_for(synthesizer: Synthesizer) -> Callable[[int], str]:
    """The backend's own token names when it has them (e.g. codec code numbers), else the ids."""
    label = getattr(synthesizer.backend, "token_label", None)
    return label if callable(label) else str


def figures(comparison: Comparison) -> dict[str, object]:
    """The four charts, by name."""
    ar, spec = comparison.ar, comparison.spec
    return {
        "accepted_length": charts.accepted_length_figure(spec.generation),
        "tokens_vs_time": charts.tokens_vs_time_figure(ar.generation, spec.generation),
        "timing_breakdown": charts.timing_breakdown_figure(ar, spec),
        "acceptance_by_position": charts.acceptance_by_position_figure(spec.generation),
    }


# ---------------------------------------------------------------------------
# Audio files
# ---------------------------------------------------------------------------

AUDIO_ROOT_NAME = "ssd_demo_audio"
AUDIO_MAX_AGE_SECONDS = 3600


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float [-1, 1] -> int16 with one fixed gain, so two clips keep their relative loudness."""
    audio = np.nan_to_num(np.asarray(audio, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def write_wav(path: Path, audio: np.ndarray, sample_rate: int) -> Path:
    soundfile.write(str(path), to_int16(audio), sample_rate, subtype="PCM_16")
    return path


def _slug(value: object) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text)


def audio_directory(root: Path | None = None) -> Path:
    """A fresh directory per request (so concurrent users never share files); old ones are pruned."""
    root = root or Path(tempfile.gettempdir()) / AUDIO_ROOT_NAME
    root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - AUDIO_MAX_AGE_SECONDS
    for old in root.iterdir():
        try:
            if old.is_dir() and old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # another request pruned it first
    return Path(tempfile.mkdtemp(dir=root))


def write_audio_files(comparison: Comparison, directory: Path | None = None) -> tuple[Path, Path]:
    """Both clips as 16-bit WAVs whose names say what they are."""
    directory = directory or audio_directory()
    config = comparison.config
    stem = f"{_slug(comparison.preset)}_seed{comparison.seed}"
    ar_path = directory / f"{stem}_autoregressive.wav"
    spec_path = directory / (
        f"{stem}_speculative_{_slug(comparison.draft)}_{_slug(config.acceptance)}"
        f"_K{config.draft_len}_beta{_slug(float(config.beta))}.wav"
    )
    write_wav(ar_path, comparison.ar.audio, comparison.ar.sample_rate)
    write_wav(spec_path, comparison.spec.audio, comparison.spec.sample_rate)
    return ar_path, spec_path


# ---------------------------------------------------------------------------
# Preset metadata for the page
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PresetDefaults:
    """What the controls should show for one preset."""

    key: str
    drafts: tuple[str, ...]
    default_draft: str
    config: DecodingConfig
    max_text_chars: int


FALLBACK_MAX_TEXT_CHARS = 300


def preset_defaults(preset_key: str, load_models: bool = True, progress: ProgressFn | None = None) -> PresetDefaults:
    """The preset's drafts and decoding defaults; loads the models to read them unless told not to."""
    if load_models:
        with MODEL_JOB_LOCK:
            return _preset_defaults(preset_key, load_models, progress)
    return _preset_defaults(preset_key, load_models, progress)


def _preset_defaults(preset_key: str, load_models: bool, progress: ProgressFn | None) -> PresetDefaults:
    preset = get_preset(preset_key)
    if load_models:
        _, synthesizer = load(preset_key, progress)
        config = synthesizer.config()
        max_chars = int(synthesizer.backend.max_text_chars)
    else:
        config, max_chars = DecodingConfig(), FALLBACK_MAX_TEXT_CHARS
    return PresetDefaults(
        key=preset.key,
        drafts=tuple(preset.drafts),
        default_draft=preset.default_draft,
        config=config,
        max_text_chars=max_chars,
    )


def preset_markdown(preset: Preset) -> str:
    """Label, description, licence and (without touching the network) whether the weights are here."""
    lines = [f"**{preset.label}** — {preset.description}", f"Licence: {preset.licence}"]
    if preset.needs_download:
        try:
            from .presets import preset_availability

            lines.append(f"Weights: {preset_availability(preset.key)[1]}")
        except Exception:  # noqa: BLE001 - the note is informative only
            lines.append("Weights: downloaded from the Hugging Face Hub on first use.")
        if getattr(preset, "recommended_device", "cpu") != "cpu":
            lines.append(f"Recommended device: {preset.recommended_device}.")
    return "  \n".join(lines)


def device_note() -> str:
    import torch

    if torch.cuda.is_available():
        return f"Running on CUDA ({torch.cuda.get_device_name(0)})."
    return f"Running on the CPU ({os.cpu_count()} cores visible, {torch.get_num_threads()} torch threads)."
