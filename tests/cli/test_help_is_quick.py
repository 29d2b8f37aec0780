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


def _help(command: str) -> tuple[str, list[str]]:
    """`python -m ssd_demo COMMAND --help` in a fresh interpreter: its output and the heavy modules it loaded."""
    code = (f"import json, sys\nfrom ssd_demo.__main__ import main\ntry:\n    main([{command!r}, '--help'])\n"
            f"except SystemExit:\n    pass\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *text, loaded = done.stdout.strip().splitlines()
    return "\n".join(text), json.loads(loaded)


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_help_loads_neither_torch_nor_transformers(command):
    text, loaded = _help(command)
    assert text.startswith(f"usage: python -m ssd_demo {command}")
    assert loaded == [], f"`{command} --help` loaded {loaded}"


def test_the_preset_help_names_every_preset():
    """Every built-in preset, listed in a fresh interpreter (tests register presets of their own in this one)."""
    from ssd_demo.cli.synth import PRESETS_HELP

    code = "from ssd_demo.backends.registry import list_presets\nprint(' '.join(p.key for p in list_presets()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    named = {part.strip(" ()").removesuffix(" (default)") for part in PRESETS_HELP.replace(" or ", ", ").split(",")}
    assert {name.split()[0] for name in named} == set(done.stdout.split())
