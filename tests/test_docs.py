"""The documentation stays a front door: README.md short, with the Space's front matter and small pictures; every
relative link of README.md and the guides in docs/ pointing at a file (and heading) that exists; the sections that
commands rewrite in docs/benchmarks.md present, each with its end marker."""

from support.paths import REPOSITORY

import ast
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = REPOSITORY
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DOCUMENTS = [README, *sorted(DOCS.glob("*.md"))]
BENCHMARKS = DOCS / "benchmarks.md"
MAX_README_LINES = 250
MAX_PICTURE_BYTES = 300_000
GENERATED_END = "<!-- end of generated table -->"  # measure.reporting.GENERATED_END (a test below checks)

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks and the front matter, inline code spans blanked out."""
    lines, fenced = [], False
    front = text.split("\n---\n", 1)[0].count("\n") + 2 if text.startswith("---\n") else 0
    for number, line in enumerate(text.splitlines()):
        if number < front:
            lines.append("")
            continue
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else CODE_SPAN.sub("``", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file (repeated headings get -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+?)\s*#*\s*$", line)):
            base = slug(match.group(1).replace("`", ""))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link that is not a web address."""
    links = []
    for number, line in enumerate(prose_lines(path.read_text(encoding="utf-8")), 1):
        for target in LINK.findall(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
                links.append((number, target))
    return links


def test_readme_is_read_in_five_minutes():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into a guide in docs/"


def test_readme_keeps_the_spaces_front_matter():
    text = README.read_text(encoding="utf-8")
    assert text.startswith("---\n"), "the Hugging Face Space's front matter opens README.md"
    front = text.split("---")[1]
    for field in ("title:", "sdk: gradio", "sdk_version:", "app_file: app.py", "python_version:", "license:"):
        assert f"\n{field}" in front, field


def test_readme_holds_the_two_set_up_commands():
    text = README.read_text(encoding="utf-8")
    assert ("python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && python app.py"
            in text)
    assert ("python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements-dev.txt && "
            "python -m pytest -q" in text)  # what .ci/run runs


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(document):
    broken = []
    for line, target in relative_links(document):
        file_part, _, anchor = target.partition("#")
        destination = (document.parent / unquote(file_part)).resolve() if file_part else document
        if not destination.exists():
            broken.append(f"line {line}: {target} (no such file)")
        elif anchor and destination.suffix == ".md" and unquote(anchor) not in anchors(destination):
            broken.append(f"line {line}: {target} (no such heading)")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_guide_says_who_it_is_for_and_what_it_holds():
    for guide in sorted(DOCS.glob("*.md")):
        head = guide.read_text(encoding="utf-8").split("\n## ", 1)[0]
        assert head.startswith("# ") and "Contents" in head, f"{guide.name}: a title, who it is for, a contents list"


def test_the_readmes_pictures_are_small():
    for _, target in relative_links(README):
        path = ROOT / unquote(target.partition("#")[0])
        if path.suffix.lower() in (".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg"):
            assert path.stat().st_size < MAX_PICTURE_BYTES, f"{target}: {path.stat().st_size} bytes"


def _constant(path: Path, name: str) -> str:
    """A module-level string constant, read without importing the module (some import the app)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.relative_to(ROOT)} has no {name}")


def rewritten_sections() -> list[str]:
    """The headings that `--docs docs/benchmarks.md` rewrites (eval, sweep, serve --bench, the timing scripts)."""
    serving = "## " + _constant(ROOT / "ssd_demo" / "cli" / "serve.py", "DOCS_SECTION")
    return [_constant(ROOT / "ssd_demo" / "measure" / "evaluation.py", "SECTION"),
            _constant(ROOT / "ssd_demo" / "measure" / "sweep_report.py", "SECTION"),
            _constant(ROOT / "scripts" / "click_timing.py", "SECTION"),
            _constant(ROOT / "scripts" / "startup_timing.py", "SECTION"),
            serving, serving + " on vLLM"]


def test_benchmarks_keeps_the_sections_commands_rewrite():
    from ssd_demo.measure.reporting import GENERATED_END as marker

    assert marker == GENERATED_END
    text = BENCHMARKS.read_text(encoding="utf-8")
    for heading in rewritten_sections():
        start = text.find(heading)  # as measure.reporting.write_section finds it
        assert start >= 0 and text[start:].startswith(heading + "\n"), f"docs/benchmarks.md lacks {heading!r}"
        following = text.find("\n## ", start + len(heading))
        section = text[start:] if following < 0 else text[start:following]
        assert GENERATED_END in section, f"{heading!r} has no {GENERATED_END}: a rewrite would drop its reading"


def test_the_model_cards_references_to_benchmarks_name_existing_sections():
    card = (ROOT / "assets" / "embedded" / "MODEL_CARD.md").read_text(encoding="utf-8")
    headings = {line.lstrip("#").strip() for line in BENCHMARKS.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")}
    for name in re.findall(r'docs/benchmarks\.md, "([^"]+)"', card):
        assert name in headings, f"MODEL_CARD.md names a section benchmarks.md lacks: {name!r}"


def test_the_link_checker_sees_what_github_sees():
    assert slug("Use the app from Python (gradio_client)") == "use-the-app-from-python-gradio_client"
    assert slug("CosyVoice 2, the paper's own system") == "cosyvoice-2-the-papers-own-system"
    assert slug("Evaluation: the embedded voice on everyday_sentences.txt") == (
        "evaluation-the-embedded-voice-on-everyday_sentencestxt")
    assert LINK.findall("see [a](b.md#c) and ![p](d.png) and [w](https://x.y)") == ["b.md#c", "d.png", "https://x.y"]
    assert prose_lines("```bash\n[x](nowhere.md)\n```\n`[y](nowhere.md)` [z](here.md)\n")[-1].endswith("[z](here.md)")
