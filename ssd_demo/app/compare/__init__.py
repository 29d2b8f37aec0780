"""The web app's Compare tab. What it does, as plain functions with no Gradio inside, by job:

    settings     the page's controls (`COMPARE_SETTINGS`: the config's own settings, in /synthesize order),
                 how each looks, and voice-prompt uploads; a click is the library's `Request`
    race         the same, streamed into a `Race`: each decoder's audio pieces and live counters on one clock
    race_chart   both lanes drawn live on that clock (SVG)
    events       the race as events (`race_events`: started, piece, tick, done, failed, stopped) for a front end
    views        the statistics table, JSON details, per-round token view and charts of a `Comparison`
    audio_files  both clips as named 16-bit WAV files
    preset_info  example texts, a preset's control defaults and description, the device note

Gradio's side, imported on its own: `arguments` (an API call's arguments -> an admitted `Request`, shared
by /synthesize and /race) and two builders that only wire these to components, `tab` (the controls,
/synthesize) and `race_view` (the race's lanes; /race maps `race_events` to component updates); `app.errors` turns `UserError`s into messages.
The pipeline itself (load, checks, warm-up, both runs, the `Comparison`) is the library's `ssd_demo.comparison`,
re-exported here; `session` names its `pipeline` module.
"""

from .audio_files import audio_directory, to_int16, write_audio_files, write_wav
from .preset_info import (PresetDefaults, device_note, example_texts, preset_defaults, preset_markdown, EXAMPLE_TEXTS,
                          MAX_EXAMPLES)
from .events import Done, Event, Failed, Piece, Started, Stopped, Tick, race_events
from .race import (Race, RaceLane, headline, lane_markdown, piece_pcm_base64, race_details, run_race,
                   slow_motion_from_files, slow_motion_of, together_note, write_replay_files)
from .race_chart import race_chart_svg
from ...comparison.slow_motion import SlowMotion
from ...comparison import (LANES, Comparison, Job, LaneSink, Prepared, Request, build_config, check_text, compare, load,
                           preferred_device, prepare, replayed_pieces, resolve_draft, resolve_voice_prompt, run,
                           token_label_for, warm_up)
from ...comparison import pipeline as session  # noqa: F401 - its name here before it moved to the library
from ...models.cpu_threads import cpu_threads_for
from .settings import (COMPARE_SETTINGS, MAX_SEED, SETTINGS_BY_NAME, VoiceUpload, read_voice_upload,
                       resolve_seed, voice_prompt_from_upload, voice_upload)
from .views import (TOKEN_COLOURS, comparison_token_view, details, end_to_end_speedup, figures, length_limit_note,
                    stats_markdown, stats_rows, token_view)

__all__ = [
    "LANES", "Race", "RaceLane", "headline", "lane_markdown", "piece_pcm_base64", "race_chart_svg", "race_details",
    "run_race", "together_note",
    "write_replay_files", "slow_motion_of", "slow_motion_from_files", "SlowMotion",
    "Done", "Event", "Failed", "Piece", "Started", "Stopped", "Tick", "race_events",
    "Job", "LaneSink", "Prepared", "prepare", "replayed_pieces", "run",
    "COMPARE_SETTINGS", "EXAMPLE_TEXTS", "MAX_EXAMPLES", "MAX_SEED", "SETTINGS_BY_NAME", "TOKEN_COLOURS",
    "Comparison", "PresetDefaults", "Request", "VoiceUpload", "audio_directory", "build_config", "check_text",
    "compare", "comparison_token_view", "cpu_threads_for", "details", "device_note", "end_to_end_speedup",
    "example_texts", "figures", "length_limit_note", "load", "preferred_device", "preset_defaults",
    "preset_markdown", "read_voice_upload", "resolve_draft", "resolve_voice_prompt", "resolve_seed", "stats_markdown", "stats_rows", "to_int16", "token_label_for",
    "token_view", "voice_prompt_from_upload", "voice_upload", "warm_up", "write_audio_files", "write_wav",
]
