"""The documentation's Python examples run as written: each ```python block of README.md and of every guide in
docs/ on its own, in a fresh interpreter, offline, from an empty folder. A block that needs what a test cannot give
(a running app, the network) is marked by a `<!-- no-run: why -->` line right above its fence, and is skipped with
that reason."""

from support.paths import REPOSITORY

import os
import re
import subprocess
import sys

import pytest

ROOT = REPOSITORY
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
NO_RUN = re.compile(r"<!--\s*no-run:\s*(.*?)\s*-->")


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line of the fence, code, why it does not run or None) for each ```python block."""
    lines = text.splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            start = index
            end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```")
            marker = NO_RUN.fullmatch(lines[start - 1].strip()) if start else None
            blocks.append((start + 1, "\n".join(lines[start + 1 : end]) + "\n", marker.group(1) if marker else None))
            index = end
        index += 1
    return blocks


def documented_blocks() -> list[tuple[str, int, str, str | None]]:
    """(document relative to the root, line, code, why it does not run or None) over README.md and docs/*.md."""
    return [(path.relative_to(ROOT).as_posix(), line, code, why)
            for path in DOCUMENTS for line, code, why in python_blocks(path.read_text(encoding="utf-8"))]


BLOCKS = documented_blocks()


def test_readme_blocks_are_found_and_every_skip_says_why():
    assert sum(why is None for _, _, _, why in BLOCKS) >= 4, BLOCKS
    assert any(document == "README.md" and why is None for document, _, _, why in BLOCKS)  # README shows one
    for document, line, code, why in BLOCKS:
        assert why != "", f"{document} line {line}: a no-run marker needs its reason"
        if "gradio_client" in code or "client." in code:
            assert why, f"{document} line {line} talks to a running app: mark it no-run"
    assert python_blocks("x\n<!-- no-run: needs a GPU -->\n```python\nprint(1)\n```\n") == [(3, "print(1)\n", "needs a GPU")]


def test_every_guide_is_searched_for_examples():
    guides = {path.name for path in DOCUMENTS[1:]}
    assert {"python-api.md", "live-demo.md", "serving.md", "vllm.md"} <= guides, guides


@pytest.mark.slow
@pytest.mark.parametrize("document, line, code, why", BLOCKS,
                         ids=[f"{document}:line{line}" for document, line, _, _ in BLOCKS])
def test_readme_python_block_runs_as_written(document, line, code, why, tmp_path):
    if why:
        pytest.skip(f"{document} line {line}: {why}")
    # PYTHONPATH stands for `pip install -e .`; the empty folder keeps files the example writes out of the checkout.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"{document} line {line} failed:\n{code}\n{run.stderr[-3000:]}"
