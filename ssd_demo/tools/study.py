"""Listening studies from the command line: create one from its file (rendering its stimuli), list the
studies, and report a study's results with or without the screening's exclusions.

CLI:
    python -m ssd_demo study create ssd_demo/listening/data/example_study.toml
    python -m ssd_demo study list
    python -m ssd_demo study results example --csv ratings.csv --json summary.json --figure mushra.png
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..config import DecodingConfig
from ..errors import InputError, UserError
from ..listening.stimulus_sets import StimulusSet
from ..listening.study import Study, load_study
from ..listening.study_sessions import database_path, list_studies, load_study_and_stimuli, studies_root, study_path
from .stimuli import Renderer, create_stimulus_set, parse_system, render_stimulus_set, tone_renderer


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
    check_systems(study, Path(path).name)
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


def check_systems(study: Study, origin: str) -> None:
    """Every system's name and decoding settings (`DecodingConfig`'s bounds), checked before anything is
    rendered, whatever the renderer: a bad beta or K fails at once, naming the file and the system."""
    for name in study.rendered_systems():
        try:
            spec = parse_system(name)
            if not spec.derived:
                DecodingConfig(**spec.overrides)
        except UserError as error:
            detail = str(error) if name in str(error) else f"system {name!r}: {error}"
            raise InputError(f"{origin}: {detail}") from None


def _answer_count(name: str, root: Path | None) -> int:
    from ..listening.store import ListeningStore

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="render a study's stimuli and install its file")
    create.add_argument("file", type=Path, help="the study file (TOML)")
    create.add_argument("--device", default=None, help="torch device (default: automatic)")
    create.add_argument("--overwrite", action="store_true", help="create a study of the same name again")
    create.add_argument("--discard-answers", action="store_true",
                        help="with --overwrite, even when the study has answers (they stay stored; results "
                             "report only sessions that heard the current stimuli)")
    create.add_argument("--tones", action="store_true",
                        help="tones instead of speech (no model; to try the study's flow quickly)")
    actions.add_parser("list", help="the studies created, with their sessions and answers")
    results = actions.add_parser("results", help="a study's statistics, screening and exports")
    results.add_argument("name", help="the study's name")
    exclusion = results.add_mutually_exclusive_group()
    exclusion.add_argument("--exclude", dest="exclude", action="store_true", default=True,
                           help="leave out the raters the screening excludes (default)")
    exclusion.add_argument("--no-exclude", dest="exclude", action="store_false", help="keep every rater")
    results.add_argument("--all-versions", action="store_true",
                         help="pool the answers to every stimulus version (default: the current stimuli only)")
    results.add_argument("--csv", type=Path, help="write every rating in long format to this CSV file")
    results.add_argument("--json", type=Path, help="write the summary (statistics, screening) to this JSON file")
    results.add_argument("--figure", type=Path, help="write the MUSHRA box plot to this image (PNG, SVG, PDF)")
    for sub in (create, results, actions.choices["list"]):
        sub.add_argument("--data-dir", type=Path, help="data directory (default: $SSD_DEMO_DATA_DIR or ./data)")


def main(args: argparse.Namespace) -> int:
    root = args.data_dir.resolve() if args.data_dir else None
    if args.action == "create":
        render = tone_renderer(seconds=1.0) if args.tones else None
        study, stimulus_set = create_study(args.file, root=root, render=render, device=args.device,
                                           overwrite=args.overwrite, discard_answers=args.discard_answers,
                                           progress=lambda line: print(line, flush=True))
        print(f"created study {study.name!r}: {len(stimulus_set.items)} sentences x {len(stimulus_set.systems)} "
              f"systems in {stimulus_set.root}; the app serves it by name")
        return 0
    if args.action == "list":
        return _list(root)
    from .study_report import report  # statistics and figures load only when asked for

    return report(args.name, root=root, exclude=args.exclude, csv_path=args.csv, json_path=args.json,
                  figure_path=args.figure, all_versions=args.all_versions)


def _list(root: Path | None) -> int:
    from ..listening.store import ListeningStore

    names = list_studies(root)
    if not names:
        print(f"no studies in {studies_root(root)}; create one with: python -m ssd_demo study create FILE")
        return 0
    with ListeningStore(database_path(root)) as store:
        for name in names:
            study, _ = load_study_and_stimuli(name, root, verify=False)
            sessions = store.study_sessions(name)
            answers = sum(store.study_progress(s.session_id)[0] for s in sessions)
            print(f"{name}: {', '.join(study.kinds)}; {len(study.systems)} systems vs {study.reference}; "
                  f"{len(sessions)} sessions, {answers} answers")
    return 0
