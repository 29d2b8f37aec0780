"""`space push`: exactly the files the Space needs (checked against what app.py reaches and loads), the Hub's API
called as a Space wants it (stubbed: the Hub is never reached), and no token ever printed."""

from support.paths import REPOSITORY

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ssd_demo.__main__ import main as cli
from ssd_demo.errors import InputError
from ssd_demo.hosting import space
from ssd_demo.hosting.space import SpaceFile, check_front_matter, check_repo_id, push, space_files

ROOT = REPOSITORY
TOKEN = "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"


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    """Every module an import anywhere in the file names (deferred ones included), absolute, with the submodules
    a `from package import name` may mean."""
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
    package = parts if path.name == "__init__.py" else parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            target = ".".join(filter(None, [base, node.module or ""]))
            found |= {target} | {f"{target}.{alias.name}" for alias in node.names}
    return found


def reachable_from_app() -> set[str]:
    """The package's modules app.py reaches through imports, deferred ones included (a superset of what a run
    imports: what the Space may need), as paths relative to the root."""
    todo, seen = [ROOT / "app.py"], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            if name.split(".")[0] != "ssd_demo":
                continue
            pieces = name.split(".")
            for end in range(1, len(pieces) + 1):  # the module and every package above it
                found = _module_file(".".join(pieces[:end]))
                if found is not None:
                    todo.append(found)
    return {p.relative_to(ROOT).as_posix() for p in seen}


@pytest.fixture(scope="module")
def dry_run() -> list[str]:
    """The paths `python -m ssd_demo space push OWNER/NAME --dry-run` lists, run as a user would."""
    done = subprocess.run([sys.executable, "-m", "ssd_demo", "space", "push", "alice/ssd-demo", "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("dry run: nothing sent") and " in " in lines[-2] and "files" in lines[-2]
    return [line.strip().split("  ", 1)[1] for line in lines[:-2]]


def test_the_dry_run_holds_every_module_the_app_reaches_and_every_file_it_loads(dry_run):
    listed = set(dry_run)
    modules = reachable_from_app()
    assert "ssd_demo/app/page.py" in modules and "ssd_demo/engine/onnx_forward.py" in modules  # the walk works
    assert not modules - listed, f"the Space would miss {sorted(modules - listed)}"
    voice = {p.relative_to(ROOT).as_posix() for p in (ROOT / "assets" / "embedded").rglob("*") if p.is_file()}
    assert voice and not voice - listed, f"the Space would miss {sorted(voice - listed)}"
    data = {p.relative_to(ROOT).as_posix() for p in (ROOT / "ssd_demo").rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    assert not data - listed, f"the package's data files {sorted(data - listed)} would be missing"
    assert {"app.py", "requirements.txt", "README.md"} <= listed


def test_the_dry_run_holds_nothing_else(dry_run):
    assert len(dry_run) == len(set(dry_run))
    for path in dry_run:
        assert (path in ("app.py", "requirements.txt", "README.md", "docs/race.png")  # the README's picture
                or path.startswith(("ssd_demo/", "assets/embedded/")))
        assert not path.startswith(("tests/", "scripts/", "data/", "runs/", ".venv")), path
        assert "__pycache__" not in path and not path.endswith(".pyc") and "/." not in path and not path.startswith(".")


def _repository(root: Path) -> Path:
    """A small checkout: what a Space needs, and what it must never get."""
    for name, text in {"app.py": "print('app')\n", "requirements.txt": "gradio\n",
                       "README.md": "---\ntitle: t\nsdk: gradio\napp_file: app.py\n---\n# t\n![race](docs/race.png) "
                                    "![web](https://example.org/x.png) ![out](../x.png) [link](docs/d.md)\n",
                       "docs/race.png": "png",
                       "ssd_demo/__init__.py": "", "ssd_demo/tokens.py": "", "ssd_demo/data/texts.json": "[]",
                       "assets/embedded/target/model.safetensors": "w" * 2000, "assets/embedded/voice.json": "{}",
                       # never sent:
                       "ssd_demo/__pycache__/x.cpython-311.pyc": "", "ssd_demo/.env": "HF_TOKEN=x",
                       "ssd_demo/hf_token.txt": "x", "ssd_demo/notes.wav": "x", "assets/teacher_voice/d.npz": "x",
                       "assets/embedded/.cache/x": "x", "tests/test_x.py": "", "scripts/s.py": "", "data/l.sqlite3": "",
                       ".venv/bin/python": "", ".git/config": "", "docs/d.md": "", "runs/r.txt": ""}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_only_the_spaces_files_are_listed_with_their_sizes(tmp_path):
    files = space_files(_repository(tmp_path))
    assert [f.path for f in files] == ["README.md", "app.py", "assets/embedded/target/model.safetensors",
                                       "assets/embedded/voice.json", "docs/race.png", "requirements.txt",
                                       "ssd_demo/__init__.py", "ssd_demo/data/texts.json", "ssd_demo/tokens.py"]
    assert dict((f.path, f.size) for f in files)["assets/embedded/target/model.safetensors"] == 2000
    assert space.listing(files)[-1].strip() == "2.2 kB  in 9 files"


def test_a_readme_without_the_gradio_front_matter_is_refused(tmp_path):
    with pytest.raises(InputError, match="no front matter"):
        check_front_matter("# Title\n")
    with pytest.raises(InputError, match="sdk: gradio"):
        check_front_matter("---\nsdk: docker\napp_file: app.py\n---\n")
    root = _repository(tmp_path)
    (root / "app.py").unlink()
    with pytest.raises(InputError, match="app.py is missing"):
        space_files(root)


@pytest.mark.parametrize("name", ["alice", "alice/", "/x", "a/b/c", "alice/ssd demo", "alice/x--y", "alice/x.git",
                                  "alice/-x", "", "a/" + "x" * 95])
def test_a_malformed_space_name_is_refused(name):
    with pytest.raises(InputError, match="OWNER/NAME"):
        check_repo_id(name)
    assert check_repo_id("alice/ssd-demo_2.0") == "alice/ssd-demo_2.0"


class StubHub:
    """HfApi's calls a push makes, recorded; `existing` holds the Space's files when it exists."""

    def __init__(self, existing: list[str] | None = None, token: str | None = None):
        self.existing, self.token, self.calls = existing, token, []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name == "repo_exists":
                return self.existing is not None
            if name == "list_repo_files":
                return list(self.existing)
            if name == "create_commit":
                return type("CommitInfo", (), {"commit_url": "https://huggingface.co/spaces/alice/s/commit/1"})()
            return None
        return call

    def called(self, name):
        return [(args, kwargs) for n, args, kwargs in self.calls if n == name]


def test_a_new_space_is_created_for_gradio_private_on_the_hardware_asked_and_sent_in_one_commit(tmp_path):
    root = _repository(tmp_path)
    files = space_files(root)
    hub = StubHub()
    push(hub, "alice/s", root, files, private=True, hardware="t4-small")
    [(args, kwargs)] = hub.called("create_repo")
    assert args == ("alice/s",) and kwargs["repo_type"] == "space" and kwargs["space_sdk"] == "gradio"
    assert kwargs["private"] is True and kwargs["space_hardware"] == "t4-small"
    [(args, kwargs)] = hub.called("create_commit")
    assert kwargs["repo_type"] == "space" and args[0] == "alice/s"
    operations = args[1]
    assert [op.path_in_repo for op in operations] == [f.path for f in files]  # exactly the listed files
    assert all(Path(op.path_or_fileobj) == root / op.path_in_repo for op in operations)
    assert not hub.called("list_repo_files") and not hub.called("update_repo_settings")


def test_an_existing_space_is_updated_never_made_public_and_loses_only_its_stale_package_files(tmp_path):
    root = _repository(tmp_path)
    files = space_files(root)
    hub = StubHub(existing=["README.md", ".gitattributes", "ssd_demo/old.py", "assets/embedded/old.onnx",
                            "notes/keep.md", "ssd_demo/__init__.py"])
    push(hub, "alice/s", root, files)  # no --private: privacy left as it is
    assert not hub.called("create_repo") and not hub.called("update_repo_settings")
    assert not hub.called("request_space_hardware")
    [(args, _)] = hub.called("create_commit")
    deleted = [op.path_in_repo for op in args[1] if type(op).__name__ == "CommitOperationDelete"]
    assert deleted == ["assets/embedded/old.onnx", "ssd_demo/old.py"]
    hub = StubHub(existing=[])
    push(hub, "alice/s", root, files, private=True, hardware="cpu-upgrade")
    assert hub.called("update_repo_settings") == [(("alice/s",), {"private": True, "repo_type": "space"})]
    assert hub.called("request_space_hardware") == [(("alice/s", "cpu-upgrade"), {})]


def _run(monkeypatch, capsys, argv, token=TOKEN, hub=None):
    import huggingface_hub

    made = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: token)
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda token=None: made.append(token) or hub or StubHub(token=token))
    status = cli(["space", "push", *argv])
    out = capsys.readouterr()
    return status, out.out + out.err, made


def test_the_command_pushes_with_the_token_and_never_prints_it(monkeypatch, capsys, tmp_path):
    root = _repository(tmp_path)
    hub = StubHub()
    status, printed, made = _run(monkeypatch, capsys, ["alice/s", "--root", str(root), "--hardware", "cpu-basic"],
                                 hub=hub)
    assert status == 0 and made == [TOKEN] and TOKEN not in printed
    assert "pushed 9 files" in printed and "https://huggingface.co/spaces/alice/s" in printed
    assert hub.called("create_repo")[0][1]["space_hardware"] == "cpu-basic"


def test_the_command_refuses_in_one_line_without_a_token_a_bad_name_or_hardware(monkeypatch, capsys, tmp_path):
    root = _repository(tmp_path)
    for argv, token, expected in ((["alice/s"], None, "no Hugging Face token: set HF_TOKEN"),
                                  (["alice"], TOKEN, "OWNER/NAME"),
                                  (["alice/s", "--hardware", "gpu9000"], TOKEN, "not one of the Hub's: cpu-basic")):
        status, printed, made = _run(monkeypatch, capsys, [*argv, "--root", str(root)], token=token)
        assert status == 2 and printed.startswith("error: ") and expected in printed
        assert len(printed.strip().splitlines()) == 1 and TOKEN not in printed


def test_a_refusal_by_the_hub_is_one_line_without_the_token(monkeypatch, capsys, tmp_path):
    root = _repository(tmp_path)

    class Refusing(StubHub):
        def repo_exists(self, *args, **kwargs):
            raise OSError("401 Client Error: Unauthorized for url: https://huggingface.co/api/spaces/alice/s\n"
                          "Invalid credentials in Authorization header")

    status, printed, _ = _run(monkeypatch, capsys, ["alice/s", "--root", str(root)], hub=Refusing())
    assert status == 2 and printed.strip() == ("error: the push to alice/s failed: 401 Client Error: Unauthorized for "
                                               "url: https://huggingface.co/api/spaces/alice/s")


def test_the_dry_run_needs_no_token_and_no_network(monkeypatch, capsys, tmp_path):
    root = _repository(tmp_path)
    status, printed, made = _run(monkeypatch, capsys, ["alice/s", "--root", str(root), "--dry-run"], token=None)
    assert status == 0 and made == [] and "assets/embedded/voice.json" in printed and "in 9 files" in printed


def test_space_files_are_plain_relative_paths():
    assert all(isinstance(f, SpaceFile) and not f.path.startswith("/") for f in space_files(ROOT))
