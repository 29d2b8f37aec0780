"""Listening studies from the command line: create one from its file (rendering its stimuli), list the
studies, and report a study's results with or without the screening's exclusions.

CLI:
    python -m ssd_demo study create ssd_demo/listening/data/example_study.toml
    python -m ssd_demo study list
    python -m ssd_demo study results example --csv ratings.csv --json summary.json --figure mushra.png
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError, UserError
from ..speech.system import parse_system
from .migrations import TAB_STUDY
from .stimulus_sets import StimulusSet
from .study import Study, load_study
from .study_sessions import database_path, study_path
from .stimuli import Renderer, create_stimulus_set, render_stimulus_set


def create_study(
    path: Path | str,
    *,
    root: Path | None = None,
    render: Renderer | None = None,
    device: str | None = None,
    overwrite: bool = False,
    discard_answers: bool = False,
    progress: Callable[[str], None] | None = None,
) -> tuple[Study, StimulusSet]:
    """Read a study file, render its stimuli (reference, systems, anchors, attention clip) and install the
    file as `<data dir>/studies/<name>.toml`. `render`: any Renderer (default: the study's preset).

    Creating again a study that has answers is refused unless `discard_answers`: those answers stay stored,
    and the results report only the sessions that heard the current stimuli (the stimulus manifest's SHA-256),
    so answers to other stimuli are left out."""
    study = load_study(path)
    if study.name == TAB_STUDY:
        raise InputError(f"{Path(path).name}: the name {TAB_STUDY!r} is the listening tab's built-in study; "
                         "choose another name")
    check_systems(study, Path(path).name, drafts=_preset_drafts(study.preset) if render is None else None)
    destination = study_path(study.name, root)
    if destination.exists() and not overwrite:
        raise InputError(f"study {study.name!r} already exists; pass --overwrite to create it again")
    answers = _answer_count(study.name, root) if destination.exists() else 0
    if answers and not discard_answers:
        raise InputError(f"study {study.name!r} already has {answers} answers; creating it again would serve other "
                         "stimuli. Pass --discard-answers as well to do it anyway: the answers stay stored, and the "
                         "results report only the sessions that heard the current stimuli")
    common = dict(root=root, base_seed=study.seed, overwrite=overwrite, progress=progress, reference=study.reference)
    if render is None:
        stimulus_set = render_stimulus_set(study.stimulus_set, study.sentences, study.rendered_systems(),
                                           preset=study.preset, device=device, **common)
    else:
        stimulus_set = create_stimulus_set(study.stimulus_set, study.sentences, study.rendered_systems(), render,
                                           preset=study.preset, **common)
    _write_atomically(destination, Path(path).read_bytes())
    return study, stimulus_set


def check_tones(path: Path | str) -> None:
    """Refuse a study with spoken attention checks for tones (the command line's --tones, the admin page's box):
    a check asks a rater to do what a voice says, and a tone says nothing, so every honest rater would fail it
    and be excluded. Tests that know the targets from the manifest may still render such a study with tones."""
    study = load_study(path)
    if study.attention_kinds and study.attention_kind == "spoken":
        raise InputError(f"{Path(path).name}: spoken attention checks need a voice to say them, and tones say nothing; "
                         "to try the flow with tones, set [attention] kind = \"noise\" (or per_block = 0)")


def check_systems(study: Study, origin: str, drafts: tuple[str, ...] | None = None) -> None:
    """Every system's name and decoding settings (`DecodingConfig`'s bounds), checked before anything is
    rendered, whatever the renderer: a bad beta or K fails at once, naming the file and the system. With `drafts`
    (the preset's, when its models render), a draft no system may name: before minutes of rendering, not after."""
    for name in study.rendered_systems():
        try:
            system = parse_system(name)
            system.check()
        except UserError as error:
            detail = str(error) if name in str(error) else f"system {name!r}: {error}"
            raise InputError(f"{origin}: {detail}") from None
        if drafts is not None and system.draft is not None and system.draft not in drafts:
            raise InputError(f"{origin}: system {name!r} names the draft {system.draft!r}; the preset "
                             f"{study.preset!r} has {', '.join(drafts)}")


def _preset_drafts(preset: str) -> tuple[str, ...]:
    from ..backends.registry import get_preset  # the presets' table: no model is loaded

    return get_preset(preset).drafts


def _answer_count(name: str, root: Path | None) -> int:
    from .study_store import ListeningStore

    database = database_path(root)
    if not database.is_file():
        return 0
    with ListeningStore(database) as store:
        return store.study_answer_count(name)


def _write_atomically(destination: Path, data: bytes) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{destination.name}-", dir=destination.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, destination)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- CLI
