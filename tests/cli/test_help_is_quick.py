"""Every command answers `--help` without loading torch or transformers (seconds saved on each), and its help
names what the library defines."""

import json
import subprocess
import sys

import pytest

from ssd_demo.__main__ import SUBCOMMANDS
from support.paths import REPOSITORY

#: Loaded only when a command runs, never for its flags.
HEAVY = ("torch", "transformers", "gradio", "onnxruntime")
#: Their flags' defaults come from the training recipes, which are defined beside the training code (torch).
RECIPE_COMMANDS = ("train", "train-draft")


def _help(command: str) -> tuple[str, list[str]]:
    """`python -m ssd_demo COMMAND --help` in a fresh interpreter: its output and the heavy modules it loaded."""
    code = (f"import json, sys\nfrom ssd_demo.__main__ import main\ntry:\n    main([{command!r}, '--help'])\n"
            f"except SystemExit:\n    pass\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *text, loaded = done.stdout.strip().splitlines()
    return "\n".join(text), json.loads(loaded)


@pytest.mark.parametrize("command", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason="the recipes' defaults are defined beside the "
                                               "training code, which imports torch"))
    if name in RECIPE_COMMANDS else name for name in SUBCOMMANDS])
def test_help_loads_neither_torch_nor_transformers(command):
    text, loaded = _help(command)
    assert text.startswith(f"usage: python -m ssd_demo {command}")
    assert loaded == [], f"`{command} --help` loaded {loaded}"


def test_the_preset_help_names_every_preset():
    from ssd_demo.backends.registry import list_presets
    from ssd_demo.cli.synth import PRESETS_HELP

    named = {part.strip(" ()").removesuffix(" (default)") for part in PRESETS_HELP.replace(" or ", ", ").split(",")}
    assert {name.split()[0] for name in named} == {p.key for p in list_presets()}
