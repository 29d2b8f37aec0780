"""What `eval` evaluates: the pair (a preset or a custom target/draft), its texts (the visitor texts or a
test-set file, with voice prompts where the backend clones voices) and the metrics that can score it.

Every choice is checked before a model loads, where it can be: a wrong flag costs a second, not a download.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import soundfile as sf

from ..backends import registry as presets
from ..errors import InputError, UserError
from ..speech.synthesis import Script, Synthesizer, VoicePrompt
from .test_sets import TestItem, TestSet, TestSetError, read_test_set
from .visitor_texts import BUCKETS, visitor_texts

METRICS = ("wer", "dnsmos")
#: Length buckets of a test set's texts, by word count (the visitor texts come in their own buckets).
TEST_SET_BUCKETS = ((8, "1-8 words"), (15, "9-15 words"), (30, "16-30 words"), (None, "31+ words"))
#: Every length bucket a report may hold (a test set's, or the visitor texts'), shortest first.
BUCKET_ORDER = ("1-8 words", "3-8 words", "9-15 words", "16-30 words", "31+ words", "paragraphs")


@dataclass(frozen=True)
class Pair:
    """The models to evaluate, as chosen on the command line (nothing loaded yet)."""

    label: str  # for the report, e.g. "preset llasa-1b-8b"
    preset: str | None  # None: a custom pair
    target: str | None = None
    draft: str | None = None
    codec: str | None = None

    @property
    def embedded(self) -> bool:
        return self.preset == "embedded"


@dataclass
class EvalItem:
    """One text to speak under every system, with its prompt built once (`Synthesizer.script`)."""

    id: str
    text: str
    bucket: str
    voice_prompt: VoicePrompt | None = None
    script: Script | None = field(default=None, repr=False)


def choose_pair(args: argparse.Namespace) -> Pair:
    """`--preset`, or `--target-model` with `--draft-model` (and optionally `--codec`): checked, not loaded."""
    custom = args.target_model is not None or args.draft_model is not None
    if custom:
        if not (args.target_model and args.draft_model):
            raise InputError("a custom pair needs both --target-model and --draft-model (Hub repo ids or local "
                             "folders)")
        if args.voice is not None:
            raise InputError("--voice is the embedded voice's folder; a custom pair takes --target-model and "
                             "--draft-model")
        return Pair(f"custom pair {args.draft_model} -> {args.target_model}", None, args.target_model, args.draft_model,
                    args.codec)
    if args.codec is not None:
        raise InputError("--codec goes with a custom pair (--target-model and --draft-model)")
    preset = presets.get_preset(args.preset)  # an unknown key is refused with the list of presets
    if args.voice is not None and preset.key != "embedded":
        raise InputError(f"--voice is the embedded voice's folder; preset {preset.key!r} has its own models")
    return Pair("the embedded voice" if preset.key == "embedded" else f"preset {preset.key}", preset.key)


def load_pair(pair: Pair, args: argparse.Namespace) -> Synthesizer:
    if pair.preset is None:
        options = {"codec_ref": pair.codec} if pair.codec else {}
        return presets.load_custom_pair(pair.target, pair.draft, device=args.device, **options)
    if pair.embedded:
        from ..backends.embedded import load_synthesizer  # deferred: a backend, as in presets

        return load_synthesizer(device=args.device or "cpu", path=args.voice)
    return presets.load_preset(pair.preset, device=args.device)


def choose_metrics(text: str | None, pair: Pair) -> tuple[str, ...]:
    """`--metrics`: WER and DNSMOS for the embedded voice, WER for every other pair, unless chosen."""
    if not text:
        return ("wer", "dnsmos") if pair.embedded else ("wer",)
    chosen = tuple(dict.fromkeys(m.strip().lower() for m in text.split(",") if m.strip()))
    unknown = [m for m in chosen if m not in METRICS]
    if unknown or not chosen:
        retired = " (per, the eSpeak-trained phoneme recognizer's score, is retired: Whisper's WER replaces it)" \
            if "per" in unknown else ""
        raise InputError(f"--metrics: unknown metric(s) {unknown or [text]}; choose from {', '.join(METRICS)}"
                         + retired)
    return chosen


def choose_whisper(ref: str | None, pair: Pair) -> str:
    """`--whisper`: Whisper tiny.en (the packaged judge) for the embedded voice, large-v3 for the others."""
    from .asr import DEFAULT_WHISPER, TINY_EN

    return ref or (TINY_EN if pair.embedded else DEFAULT_WHISPER)


def choose_drafts(text: str | None, synth: Synthesizer) -> list[str]:
    """`--drafts`, or every draft of the pair, its default first."""
    if not text:
        return [synth.draft_name] + [d for d in synth.drafts if d != synth.draft_name]
    drafts = list(dict.fromkeys(d.strip() for d in text.split(",") if d.strip()))
    unknown = [d for d in drafts if d not in synth.drafts]
    if unknown or not drafts:
        raise InputError(f"--drafts: unknown draft(s) {unknown or [text]}; this pair has {', '.join(synth.drafts)}")
    return drafts


def read_items(args: argparse.Namespace) -> tuple[TestSet | None, list[tuple[str, str, str]]]:
    """(the test set or None, [(id, text, bucket)]) before any model loads; prompt wavs are only checked here."""
    if args.test_set is None:
        if args.limit is not None:
            raise InputError("--limit takes the first items of --test-set; for the visitor texts use --per-bucket")
        items = visitor_texts(args.per_bucket)
        if args.buckets:
            wanted = [b.strip() for b in args.buckets.split(",") if b.strip()]
            unknown = [b for b in wanted if b not in BUCKETS]
            if unknown:
                raise InputError(f"unknown bucket(s) {unknown}; choose from {', '.join(BUCKETS)}")
            items = [(bucket, text) for bucket, text in items if bucket in wanted]
        rows = [(f"{bucket} #{i}", text, bucket) for i, (bucket, text) in enumerate(items, start=1)]
        return None, _at_least_two(rows, "raise --per-bucket or choose more --buckets")
    if args.per_bucket is not None or args.buckets:
        raise InputError("--per-bucket and --buckets choose among the visitor texts; with --test-set the file "
                         "gives the texts (--limit N takes its first N)")
    if args.limit is not None and args.limit < 2:
        raise InputError(f"--limit must be at least 2, got {args.limit}")
    test_set = read_test_set(args.test_set)
    chosen = test_set.items[: args.limit]
    return test_set, _at_least_two([(item.id, item.text, length_bucket(item.text)) for item in chosen],
                                   "give a test set with at least two texts")


def _at_least_two(rows: list, hint: str) -> list:
    if len(rows) < 2:
        raise InputError(f"the evaluation needs at least two texts, got {len(rows)}: {hint}")
    return rows


def length_bucket(text: str) -> str:
    words = len(text.split())
    return next(name for limit, name in TEST_SET_BUCKETS if limit is None or words <= limit)


def prepare_items(synth: Synthesizer, test_set: TestSet | None, rows: list[tuple[str, str, str]],
                  notes: list[str]) -> list[EvalItem]:
    """Each text with its voice prompt (read from the test set's wavs when the backend clones voices) and its
    prompt built once: a text or clip the backend refuses fails here, naming the item, before any timing."""
    clones = synth.backend.supports_voice_prompt
    by_id = {item.id: item for item in test_set.items} if test_set is not None else {}
    if test_set is not None and test_set.has_voice_prompts and not clones:
        notes.append(f"the test set's voice prompts are ignored: {synth.backend.name} speaks in its own voice and "
                     "has no voice cloning; every text is spoken by that voice")
    items = []
    for item_id, text, bucket in rows:
        source = by_id.get(item_id)
        prompt = _voice_prompt(source) if clones and source is not None and source.prompt_wav else None
        try:
            script = synth.script(text, prompt)
        except UserError as error:
            where = f"line {source.line}" if source is not None else item_id
            raise InputError(f"text {item_id!r} ({where}) cannot be spoken: {error}") from None
        items.append(EvalItem(item_id, text, bucket, prompt, script))
    return items


def _voice_prompt(item: TestItem) -> VoicePrompt:
    try:
        audio, rate = sf.read(str(item.prompt_wav), dtype="float32", always_2d=True)
    except (OSError, RuntimeError) as error:  # soundfile's LibsndfileError is a RuntimeError
        raise TestSetError(f"line {item.line}: prompt wav {item.prompt_wav} cannot be read as audio: {error}") from None
    return VoicePrompt(audio=audio.mean(axis=1), sample_rate=rate, transcript=item.prompt_text or "")


def describe_test_set(test_set: TestSet | None) -> dict:
    if test_set is None:
        return {"test_set": None, "test_set_format": None}
    return {"test_set": Path(test_set.path).name, "test_set_format": test_set.format}
