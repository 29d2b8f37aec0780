"""The command-line wrapper the timing scripts share: parse, run, and report bad input in one line."""

from __future__ import annotations

import argparse
import sys
from typing import Callable


def run_cli(prog: str, doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
            main: Callable[[argparse.Namespace], int], argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=doc.strip().splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return int(main(args) or 0)
    except (ValueError, FileNotFoundError) as error:  # bad input: a one-line message, not a traceback
        print(f"error: {error}", file=sys.stderr)
        return 2
