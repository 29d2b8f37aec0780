"""The package stays easy to change: modules and functions of a readable size, layers that the architecture guide's
layout (docs/architecture.md) names."""

from support.paths import REPOSITORY

import ast
from pathlib import Path

ROOT = REPOSITORY
PACKAGE = ROOT / "ssd_demo"
MAX_LINES = 400
MAX_FUNCTION_LINES = 80
#: Gradio layout builders read top to bottom like the page they draw: the one exception to the function bar.
LAYOUT_BUILDERS = {"build_compare_tab", "build_listening_tab", "build_study_admin"}


def _sources() -> list[Path]:
    return [*PACKAGE.rglob("*.py"), ROOT / "app.py", *(ROOT / "ssd_vllm_plugin").rglob("*.py")]


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these along their seams: {long}"


def test_no_function_is_over_80_lines_but_the_gradio_layout_builders():
    long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in LAYOUT_BUILDERS:
                if (lines := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert not long, f"split these into named steps: {long}"
    for builder in LAYOUT_BUILDERS:  # the exceptions exist (a renamed builder must not leave a stale name here)
        assert any(f"def {builder}(" in p.read_text(encoding="utf-8") for p in (PACKAGE / "app").rglob("*.py")), builder


def test_the_architecture_guides_layout_names_every_package_folder():
    guide = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = guide.index("## Layout")
    following = guide.find("\n## ", start + 1)
    layout = guide[start:] if following < 0 else guide[start:following]
    folders = {p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")} - {"."}
    missing = [folder for folder in sorted(folders) if f"{folder.rsplit('/', 1)[-1]}/" not in layout]
    assert not missing, f"the layout in docs/architecture.md does not show {missing}"
