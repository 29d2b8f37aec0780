"""Command line: python -m ssd_demo {synth,bench,compare,eval,sweep,stimuli,study,serve,vllm-batch,train,train-draft,space} ...

Each subcommand has a module in `ssd_demo.cli` (its flags and what it prints; the work is in the library)
that provides `add_arguments(parser)` and `main(args) -> int`. Modules are imported only when
their subcommand runs, so `python -m ssd_demo --help` stays fast (a command's own `--help` loads its module,
and with it torch and transformers for most: seconds). A `UserError` (or a file the user named that does not
exist) ends with a one-line message and exit status 2; any other exception is a bug: its traceback and
exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from .errors import UserError

SUBCOMMANDS = {
    "synth": ("ssd_demo.cli.synth", "synthesise text to a WAV file (AR or speculative)"),
    "bench": ("ssd_demo.cli.bench", "time AR vs speculative vs transformers' assisted generation"),
    "compare": ("ssd_demo.cli.compare", "the app's comparison: AR then speculative on one text, both WAVs and the speedup"),
    "eval": ("ssd_demo.cli.evaluation", "AR, exact speculative and SSD on a test set: WER (Whisper), DNSMOS, speedups"),
    "train": ("ssd_demo.cli.train", "build the corpus and train the embedded voice"),
    "stimuli": ("ssd_demo.cli.stimuli", "render a listening-test stimulus set"),
    "study": ("ssd_demo.cli.study", "create a listening study from its file, list studies, report results"),
    "sweep": ("ssd_demo.cli.sweep", "map speed against fidelity for every acceptance rule"),
    "serve": ("ssd_demo.cli.serve", "serve one preset over HTTP: OpenAI's /v1/audio/speech, audio streamed as decoded"),
    "vllm-batch": ("ssd_demo.cli.vllm_batch", "render a file of texts through the vLLM engine in one batch"),
    "train-draft": ("ssd_demo.cli.train_draft",
                    "train the SSD paper's layer draft for CosyVoice 2 on the target's own generations"),
    "space": ("ssd_demo.cli.space", "push the demo to a Hugging Face Space (--dry-run: list the files it sends)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m ssd_demo", description="Speech speculative decoding demo")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.print_help()
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nerror: unknown command {argv[0]!r}; the commands are {', '.join(SUBCOMMANDS)}", file=sys.stderr)
            return 2
        return 0
    name = argv[0]
    module_name, help_text = SUBCOMMANDS[name]
    module = importlib.import_module(module_name)
    command_parser = argparse.ArgumentParser(prog=f"python -m ssd_demo {name}", description=help_text)
    module.add_arguments(command_parser)
    args = command_parser.parse_args(argv[1:])
    try:
        return int(module.main(args) or 0)
    except (UserError, FileNotFoundError) as error:
        # Bad input (a setting, an option, a file the user named) is the user's to fix: one line, no traceback.
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception:  # anything else is a bug: the traceback is what a report needs
        traceback.print_exc()
        print(f"internal error in 'python -m ssd_demo {name}' (a bug, not your input): the traceback is above",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
