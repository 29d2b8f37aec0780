"""`python -m ssd_demo study create|list|results`: its flags and what it prints (creating a study is
`ssd_demo.listening.study_setup`, its results `ssd_demo.listening.study_report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..listening.study_sessions import database_path, list_studies, load_study_and_stimuli, studies_root


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
    results.add_argument("--no-objective", dest="objective", action="store_false",
                         help="leave out the objective metrics (ASR word errors, DNSMOS, duration per clip; about a "
                              "second a clip the first time, then read back from the stimulus folder)")
    for sub in (create, results, actions.choices["list"]):
        sub.add_argument("--data-dir", type=Path, help="data directory (default: $SSD_DEMO_DATA_DIR or ./data)")


def main(args: argparse.Namespace) -> int:
    root = args.data_dir.resolve() if args.data_dir else None
    if args.action == "create":
        # rendering loads the models' code (torch): only here, not for --help, list or results
        from ..listening.stimuli import tone_renderer
        from ..listening.study_setup import check_tones, create_study

        if args.tones:
            check_tones(args.file)
        render = tone_renderer(seconds=1.0) if args.tones else None
        study, stimulus_set = create_study(args.file, root=root, render=render, device=args.device,
                                           overwrite=args.overwrite, discard_answers=args.discard_answers,
                                           progress=lambda line: print(line, flush=True))
        print(f"created study {study.name!r}: {len(stimulus_set.items)} sentences x {len(stimulus_set.systems)} "
              f"systems in {stimulus_set.root}; the app serves it by name")
        return 0
    if args.action == "list":
        return _list(root)
    from ..listening.study_report import report  # statistics and figures load only when asked for

    return report(args.name, root=root, exclude=args.exclude, csv_path=args.csv, json_path=args.json,
                  objective=args.objective,
                  figure_path=args.figure, all_versions=args.all_versions)


def _list(root: Path | None) -> int:
    from ..listening.study_store import ListeningStore

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
