"""The package stays easy to change: modules of a readable size, layers that README's layout names."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ssd_demo"
MAX_LINES = 500


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these along their seams: {long}"


def test_readme_layout_names_each_layer_and_every_package_folder():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):]
    folders = {p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")} - {"."}
    missing = [folder for folder in sorted(folders) if f"{folder.rsplit('/', 1)[-1]}/" not in layout]
    assert not missing, f"README's layout does not show {missing}"
