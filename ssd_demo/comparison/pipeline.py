"""The comparison pipeline: prepare a request once, then run both decoders and tell the caller as they go
(one click of the app's Compare tab, one `python -m ssd_demo compare`).

`prepare` does every step a comparison needs, each once and in this order: load the preset, check the
text, resolve the seed, the settings, the draft and the voice prompt, split the text into its chunks
and prompts (the `Script` both runs decode), then, on the machine that decodes, check the GPU memory,
set the CPU threads, warm up and measure this machine's draft and verify costs. `run` decodes both runs
with what was prepared and returns the `Comparison`; given a `LaneSink` (the race) it streams each decoder's
audio pieces and round counts to it, and where the machine allows (`lanes.concurrent_lanes`) both decode at
once, each in a worker process on a core of its own; elsewhere autoregressive first, then speculative, both
recorded, then, once the models are free, told to it on one clock at their measured pace (`replay_recorded`);
`compare` decodes AR, then speculative, and streams nothing. `compare` (the `/synthesize` path) and the race (`/race`) are both `run(prepare(...))`, one model
job at a time (`model_turn`).

On a Hugging Face ZeroGPU Space the models reach a GPU only inside one decorated call, in a worker
process that nothing can stream out of: there the device steps and both timed runs happen in that one
call (`decode_job`, on plain picklable data), and a sink is told both runs afterwards on one clock, each
piece when its chunk's measured seconds had passed (`replay.recording_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from ..models import memory as model_memory
from ..engine.cancellation import StopCheck
from ..config import DecodingConfig
from ..models.cpu_threads import cpu_threads_for
from ..engine.calibration import StepCosts, calibrated_costs, is_calibrated
from ..backends.registry import MODEL_JOB_LOCK, Preset, load_preset
from ..engine.results import SpeedupReport, compare_runs
from ..speech.streaming import AudioPiece
from ..speech.synthesis import Script, SynthesisResult, Synthesizer, VoicePrompt
from .lanes import LANES, concurrent_lanes, decode_lane, lane_workers
from .models import ProgressFn, load, preferred_device, token_label_for, warm_up
from .replay import Recording, Told, recording_of, replay_at_pace
from .request import (TEXT_NORMALIZER, Request, build_config, check_text, request_seed, resolve_draft,
                      resolve_voice_prompt)



@dataclass
class Comparison:
    """Both runs of one request, and what they tell: the speedup report, the measured costs, the settings."""

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
    #: Why the two runs decoded one after the other ("": at once, each on a core of its own)
    apart: str = ""
    #: Racing at once: how much slower each lane's language model ran beside the other than alone on this machine
    #: (measured at start-up, `lanes.LaneWorkers.measure_together`; empty when not measured)
    slowdown: dict[str, float] = field(default_factory=dict)
    #: A race whose lanes decoded apart: what each lane told its sink, on its own clock, for `replay_recorded` to tell
    #: the race's sink on one clock once the models are free (empty: streamed as decoded, or no race)
    recorded: tuple[Told, ...] = ()


class LaneSink(Protocol):
    """What a race tells its caller, from the decoding thread: each lane's events as it decodes, or, where the lanes
    decoded one after the other, both lanes' events replayed on one clock (`replaying` first)."""

    def replaying(self) -> None:
        """The lanes decoded one after the other: what follows is both lanes replayed on one clock from now, each at
        its measured pace (`replay.replay_at_pace`)."""

    def started(self, lane: str) -> None: ...

    def counted(self, lane: str, tokens: int, calls: int, rejected: int = 0) -> None:
        """After decoding rounds: tokens committed, target calls made and drafted tokens rejected so far."""

    def piece(self, lane: str, piece: AudioPiece) -> None: ...

    def finished(self, lane: str, result: SynthesisResult, seconds: float) -> None:
        """The lane's run is done; `seconds` is its `result.total_seconds` (LM + codec), the time the
        comparison reports, streamed or not."""


@dataclass(frozen=True)
class Job:
    """What both runs decode: plain, picklable data (ZeroGPU hands it to its worker process)."""

    preset: str
    owner: str | None  # whose custom pairs the preset key may name
    text: str
    config: DecodingConfig
    draft: str
    voice_prompt: VoicePrompt | None
    script: Script  # the text's chunks and prompts, built once for both runs


@dataclass(frozen=True)
class Prepared:
    """A request checked and resolved once, ready for `run`."""

    preset: Preset
    synthesizer: Synthesizer
    job: Job
    seed: int
    requested_draft: str | None  # what the request named, when the preset has no such draft
    costs: StepCosts | None  # this machine's costs; None where the GPU worker measures them (ZeroGPU)
    #: Why a race decodes its lanes one after the other ("": at once, each in a worker process on its own core)
    apart: str = ""


#: What a race whose lanes decode apart says while they decode (the room hears nothing yet).
THEN_REPLAYED = "; then both are replayed together at the pace measured"


def _no_progress(*args, **kwargs) -> None:
    return None


#: What the job holding the models is doing, for those waiting for them ("" when it did not say).
_holder = {"doing": ""}


@contextmanager
def model_turn(progress: ProgressFn, doing: str = "") -> Iterator[None]:
    """One model job at a time (`MODEL_JOB_LOCK`), saying so while another job holds the models (and
    what it is doing, when it said so in its own `doing`)."""
    if MODEL_JOB_LOCK.locked():
        other = _holder["doing"]
        progress(0.0, desc=f"Waiting for the model: {other}" if other else "Waiting for the model")
    else:
        progress(0.0, desc="Preparing the run")
    with MODEL_JOB_LOCK:
        _holder["doing"] = doing
        try:
            progress(0.0, desc="Preparing the run")
            yield
        finally:
            _holder["doing"] = ""


def prepare(request: Request, progress: ProgressFn | None = None,
            load_progress: ProgressFn | None = None) -> Prepared:
    """Load, check and resolve `request`, then get this machine ready for it (unless a GPU worker will).

    `progress(fraction, desc=...)` hears the stages; `load_progress` the loader's own steps. Raises a
    `UserError` for what the user can change: TextError, InvalidSettingError, UnknownPresetError or
    ModelLoadError. Call it while holding a `model_turn`."""
    preset, synthesizer = load(request.preset, load_progress, owner=request.owner)
    text = check_text(synthesizer, request.text)
    seed = request_seed(synthesizer, request)
    config = build_config(synthesizer, request, seed)
    draft = resolve_draft(preset, synthesizer, request.draft)
    voice_prompt = resolve_voice_prompt(synthesizer, request.voice_prompt)
    script = synthesizer.script(text, voice_prompt, text_normalizer=request.accepted(TEXT_NORMALIZER))
    job = Job(preset.key, request.owner, text, config, draft, voice_prompt, script)
    costs = None
    if not decodes_in_gpu_worker():
        job, costs = get_ready(synthesizer, job, progress or _no_progress)
    return Prepared(preset, synthesizer, job, seed,
                    requested_draft=request.draft if request.draft and request.draft != draft else None, costs=costs,
                    apart=concurrent_lanes(synthesizer, preset, decodes_in_gpu_worker()))


def get_ready(synthesizer: Synthesizer, job: Job, progress: ProgressFn) -> tuple[Job, StepCosts]:
    """The device steps (`ready_machine`); returns the job with adaptive K deciding by this machine's
    costs, and the costs."""
    costs = ready_machine(synthesizer, job.draft, progress)
    if job.config.adaptive_draft_len and job.config.verify_costs is None:
        job = replace(job, config=job.config.with_(cost_ratio=costs.draft, verify_costs=costs.verify))
    return job, costs


def ready_machine(synthesizer: Synthesizer, draft: str, progress: ProgressFn) -> StepCosts:
    """Check the GPU memory, set the CPU threads, warm up, and measure this machine's draft and verify
    costs (each once per process; what the app also does in the background when it starts)."""
    model_memory.check_gpu_memory(synthesizer)  # on ZeroGPU the only place where the GPU can be measured
    if synthesizer.device.type == "cpu":
        # Process-wide, but safe: model jobs run one at a time (`model_turn`).
        torch.set_num_threads(cpu_threads_for(synthesizer))
    progress(0.1, desc="Warming up the models (first run only)")
    warm_up(synthesizer, draft)
    # Measured once per pair: shown next to the measured speedup, and what adaptive K decides with, so
    # that it drafts nothing where drafting does not pay.
    draft_model = synthesizer.drafts[draft]
    if not is_calibrated(synthesizer.target, draft_model):
        progress(0.2, desc="Measuring this machine's draft and verify costs (first run only; up to half a minute "
                           "on a busy CPU)")
    return calibrated_costs(synthesizer.target, draft_model)


def run(prepared: Prepared, progress: ProgressFn | None = None, should_stop: StopCheck | None = None,
        lanes: LaneSink | None = None) -> Comparison:
    """Both decoders on the prepared job's text and settings: at once in the lane workers (streamed to `lanes`)
    where `prepared.apart` is "", else autoregressive, then speculative; given `lanes`, what both told is then in
    `Comparison.recorded`, for `replay_recorded` once the models are free (`lanes` hears nothing meanwhile).
    `should_stop` is asked between chunks and rounds of both
    runs: `Cancelled` ends the work within one round."""
    progress = progress or _no_progress
    slowdown: dict[str, float] = {}
    recorded: tuple[Told, ...] = ()
    if decodes_in_gpu_worker():
        # Progress and stop checks cannot cross into the GPU worker process; report the stage before it
        # (a stopped ZeroGPU run ends when its GPU allocation does).
        follows = THEN_REPLAYED if lanes is not None else ""
        progress(0.2, desc=f"Decoding on the GPU (AR, then speculative){follows}")
        ar, spec, costs = _decode_on_gpu(prepared.job)
        if lanes is not None:
            recorded = (*recording_of(LANES[0], ar), *recording_of(LANES[1], spec))
        apart = "one GPU runs one decoder at a time"
    else:
        apart = ((prepared.apart or _workers_started(prepared, progress)) if lanes is not None
                 else "a comparison decodes one run after the other")
        if not apart:
            progress(0.25, desc=f"Decoding (draft '{prepared.job.draft}')")  # the page adds how the lanes share the machine
            workers = lane_workers(prepared.preset.key)
            ar, spec = workers.decode(prepared.job, lanes, should_stop)
            slowdown = dict(workers.slowdown)
        elif lanes is not None:
            recording = Recording()
            ar, spec = decode_both(prepared.synthesizer, prepared.job, progress, should_stop, recording,
                                   then=THEN_REPLAYED)
            recorded = tuple(recording.told)
        else:
            ar, spec = decode_both(prepared.synthesizer, prepared.job, progress, should_stop)
        costs = prepared.costs
    job, synthesizer = prepared.job, prepared.synthesizer
    return Comparison(
        preset=prepared.preset.key,
        draft=job.draft,
        seed=prepared.seed,
        # Adaptive K decided with this machine's costs: report them with the settings.
        config=job.config.with_(cost_ratio=spec.config.cost_ratio, verify_costs=spec.config.verify_costs),
        ar=ar,
        spec=spec,
        report=compare_runs(ar.generation, spec.generation),
        token_label=token_label_for(synthesizer),
        costs=costs,
        requested_draft=prepared.requested_draft,
        left_out=synthesizer.left_out(job.text),
        apart=apart,
        slowdown=slowdown,
        recorded=recorded,
    )


def replay_recorded(comparison: Comparison, lanes: LaneSink, should_stop: StopCheck | None = None,
                    progress: ProgressFn | None = None) -> None:
    """Tell `lanes` what both lanes of a race decoded apart told their recording, on one clock at their measured pace
    (`replay.replay_at_pace`): the faster lane finishes first and is heard first. Call it once the models are free
    (outside `model_turn`): the replay takes as long as the slower lane did. Raises `Cancelled` when stopped."""
    (progress or _no_progress)(0.9, desc="Replaying both runs")
    replay_at_pace(comparison.recorded, lanes, should_stop, LANES)


def compare(request: Request, progress: ProgressFn | None = None, should_stop: StopCheck | None = None) -> Comparison:
    """Load the preset, validate everything, and run both decoders (every result at once).

    Raises what `prepare` raises, for the UI to show as a message; `Cancelled` when `should_stop` says so."""
    progress = progress or _no_progress
    with model_turn(progress):
        return run(prepare(request, progress, load_progress=progress), progress, should_stop)


def _workers_started(prepared: Prepared, progress: ProgressFn) -> str:
    """"" once the lane workers for this preset are up (started and waited for here when not yet), else why
    not: the race then decodes one lane after the other."""
    workers = lane_workers(prepared.preset.key)
    if workers.wait_ready(report=lambda doing: progress(0.2, desc=doing)):
        return ""
    return workers.error or "the lanes' decoders did not start in time"


def decode_both(synthesizer: Synthesizer, job: Job, progress: ProgressFn, should_stop: StopCheck | None = None,
                lanes: LaneSink | None = None, then: str = "") -> tuple[SynthesisResult, SynthesisResult]:
    """Both timed runs, AR first, streamed to `lanes` when given; the synthesizer must be ready (`get_ready`).
    `then` ends both stage lines (what comes next)."""
    progress(0.25, desc=f"Autoregressive decoding (one target call per token){then}")
    ar = decode_lane(synthesizer, job, "autoregressive", should_stop, lanes)
    progress(0.6, desc=f"Speculative decoding (draft '{job.draft}', K = {job.config.draft_len}){then}")
    spec = decode_lane(synthesizer, job, "speculative", should_stop, lanes)
    return ar, spec


def decode_job(job: Job) -> tuple[SynthesisResult, SynthesisResult, StepCosts]:
    """Get ready and run both decoders in one call, looking the resident models up by preset key (what
    ZeroGPU runs in its worker, so that both timed runs share one GPU allocation)."""
    synthesizer = load_preset(job.preset, device=preferred_device(), owner=job.owner)
    job, costs = get_ready(synthesizer, job, _no_progress)
    ar, spec = decode_both(synthesizer, job, _no_progress)
    return ar, spec, costs


def gpu_seconds(job: Job) -> int:
    """ZeroGPU time to ask for: warm-up + AR + speculative grow with the length limit (the default 60 s
    would cut off long Llasa-8B runs)."""
    return int(min(300, 60 + 0.1 * job.config.max_new_tokens))


def _zerogpu_decorator() -> Callable | None:
    """`spaces.GPU` on a Hugging Face ZeroGPU Space, None everywhere else."""
    try:
        import spaces  # type: ignore[import-not-found]
    except ImportError:
        return None
    return spaces.GPU


_ZEROGPU = _zerogpu_decorator()
#: `decode_job` in one GPU allocation on a ZeroGPU Space; None where the models decode in this process.
_decode_on_gpu: Callable[[Job], tuple[SynthesisResult, SynthesisResult, StepCosts]] | None = (
    _ZEROGPU(duration=gpu_seconds)(decode_job) if _ZEROGPU is not None else None)


def decodes_in_gpu_worker() -> bool:
    """Whether model work runs in ZeroGPU's worker process (where nothing can stream out of a run)."""
    return _decode_on_gpu is not None
