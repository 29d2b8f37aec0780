"""The package installs (pip install . builds this wheel): ssd_demo and its data, nothing else; an installed
package finds the assets through SSD_DEMO_ASSETS and says so when they are missing."""

from support.paths import REPOSITORY

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = REPOSITORY
# Left out of the copy the wheel is built from: large or generated folders at the root, caches anywhere.
NOT_COPIED_AT_ROOT = {".git", ".venv", "assets", "data", "runs", "build", "artifacts", ".pytest_cache", ".gradio"}


def _not_copied(folder: str, names: list[str]) -> set[str]:
    at_root = Path(folder) == ROOT
    return {n for n in names if n == "__pycache__" or n.endswith(".egg-info") or (at_root and n in NOT_COPIED_AT_ROOT)}


@pytest.mark.slow  # tens of seconds: left out of the quick run
def test_the_wheel_holds_the_package_and_its_data_only(tmp_path):
    source = tmp_path / "source"  # a copy, so that the build's own folders stay out of the checkout
    shutil.copytree(ROOT, source, ignore=_not_copied)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    ".", "-w", str(tmp_path / "dist")], cwd=source, check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("ssd_demo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    top = {name.split("/")[0] for name in names}
    assert top == {"ssd_demo", next(t for t in top if t.endswith(".dist-info"))}, top  # no tests/, scripts/, assets/
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "ssd_demo").rglob("*.py")}
    assert modules - names == set(), "modules missing from the wheel"
    assert "ssd_demo/measure/data/visitor_texts.json" in names  # read by the eval command
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "Requires-Dist: torch==" in metadata  # requirements.txt's pins


def test_a_missing_assets_folder_names_the_variable(tmp_path, monkeypatch):
    from ssd_demo.models.assets import ENV_VAR, asset_path
    from ssd_demo.backends.embedded import default_path, load_synthesizer

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    assert default_path() == asset_path("embedded") == tmp_path / "nowhere" / "embedded"
    with pytest.raises(FileNotFoundError, match=f"{ENV_VAR}.*nowhere.*{ENV_VAR}=/path/to/repo/assets"):
        load_synthesizer()

    monkeypatch.setenv(ENV_VAR, str(ROOT / "assets"))  # the checkout's own, named explicitly
    assert default_path() == ROOT / "assets" / "embedded"
    monkeypatch.delenv(ENV_VAR)
    assert default_path() == ROOT / "assets" / "embedded"  # a checkout needs no variable
