"""The demo as a Hugging Face Space: which files it needs (`space_files`, pure) and pushing them (`push`).

Why through the Hub's API and not git: the Hub refuses a git push holding files over 10 MB, or binaries over 1 MB,
outside its large-file storage (the voice's codec decoder is 35 MB, its target 21 MB). `HfApi.create_commit`
asks the Hub how to send each file and sends the large ones to that storage; one commit holds them all.

What a Space needs: app.py (its entry point), requirements.txt (its packages), README.md (its front matter says
sdk: gradio and app_file: app.py), the package (ssd_demo/: its modules and the data files they read) and the
embedded voice (assets/embedded/), and the pictures the README shows (the Space's landing page: docs/race.png).
Nothing else goes: not tests/, scripts/, data/, docs/ (but those pictures), the teacher voice's
training corpus (assets/teacher_voice/, read only by training), caches, virtual environments, hidden files (.git,
.env, tokens) or anything outside those folders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

#: Files at the repository's root that a Space needs.
ROOT_FILES = ("app.py", "requirements.txt", "README.md")
#: Folders sent, each with the file suffixes sent from it (None: every file).
FOLDERS: dict[str, tuple[str, ...] | None] = {
    "ssd_demo": (".py", ".json", ".toml", ".md", ".txt", ".js", ".css", ".html"),
    "assets/embedded": None,
}
#: Names never sent wherever they are: caches, compiled files, hidden files (.git, .env, .cache), databases.
NEVER = re.compile(r"^(__pycache__|.*\.py[co]|\..*|.*\.sqlite3.*)$")
#: Files that may hold a secret (a token, a key) are not sent either; Python modules are code, whatever their name.
SECRET = re.compile(r"(token|secret|credential|password|\.pem$|\.key$)", re.I)
#: Paths on the Space that a push owns: files there that are no longer sent are deleted.
OWNED_PREFIXES = ("ssd_demo/", "assets/", "docs/")
#: The README's front matter must say this much for the Hub to run the app.
FRONT_MATTER = {"sdk": "gradio", "app_file": "app.py"}
#: A picture in markdown, ![alt](path): those the README shows with a path inside the repository travel with it.
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
#: OWNER/NAME as the Hub spells a repository: letters, digits, "-", "_" and ".", at most 96 characters in all.
REPO_ID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class SpaceFile:
    path: str  # relative to the repository root, "/"-separated: where it lands on the Space
    size: int  # bytes


def space_files(root: Path) -> list[SpaceFile]:
    """The files the Space needs from the repository at `root`, sorted by path. InputError where one is missing or
    the README's front matter would not run the app."""
    root = Path(root)
    found = []
    for name in ROOT_FILES:
        path = root / name
        if not path.is_file():
            raise InputError(f"{name} is missing from {root}: a Space needs it (run from the repository's root)")
        found.append(path)
    readme = (root / "README.md").read_text(encoding="utf-8")
    check_front_matter(readme)
    found += readme_images(readme, root)
    for folder, suffixes in FOLDERS.items():
        base = root / folder
        if not base.is_dir():
            raise InputError(f"{folder}/ is missing from {root}: a Space needs it")
        found += [path for path in _walk(base) if suffixes is None or path.suffix in suffixes]
    return sorted((SpaceFile(path.relative_to(root).as_posix(), path.stat().st_size) for path in found),
                  key=lambda f: f.path)


def readme_images(readme: str, root: Path) -> list[Path]:
    """The pictures the README shows from inside the repository (not links to the web, nothing outside `root`)."""
    pictures = []
    for target in IMAGE.findall(readme):
        if ":" in target or target.startswith(("/", "#")) or ".." in target.split("/"):
            continue
        path = root / target
        if path.is_file() and not path.is_symlink() and path not in pictures:
            pictures.append(path)
    return pictures


def _walk(folder: Path):
    """Plain files under `folder`, not descending into caches or hidden folders; links are not followed."""
    for entry in sorted(folder.iterdir()):
        if NEVER.match(entry.name) or entry.is_symlink() or (SECRET.search(entry.name) and entry.suffix != ".py"):
            continue
        if entry.is_dir():
            yield from _walk(entry)
        elif entry.is_file():
            yield entry


def check_front_matter(readme: str) -> dict[str, str]:
    """The README's front matter (the YAML block between its first two "---" lines, read as key: value lines);
    InputError where it is missing or does not name the Gradio app."""
    lines = readme.splitlines()
    if not lines or lines[0].strip() != "---" or "---" not in (line.strip() for line in lines[1:]):
        raise InputError("README.md has no front matter (a block between --- lines at its top): the Space would not "
                         "know how to run the app")
    end = [line.strip() for line in lines[1:]].index("---") + 1
    matter = {}
    for line in lines[1:end]:
        key, colon, value = line.partition(":")
        if colon and not line.startswith((" ", "-")):
            matter[key.strip()] = value.strip().strip("\"'")
    wrong = {key: want for key, want in FRONT_MATTER.items() if matter.get(key) != want}
    if wrong:
        raise InputError("README.md's front matter must say " + ", ".join(f"{k}: {v}" for k, v in wrong.items()))
    return matter


def check_repo_id(repo_id: str) -> str:
    """OWNER/NAME, checked as the Hub would (InputError otherwise)."""
    if not REPO_ID.match(repo_id or "") or len(repo_id) > 96 or "--" in repo_id or ".." in repo_id or \
            repo_id.endswith(".git"):
        raise InputError(f"the Space must be named OWNER/NAME (letters, digits, '-', '_', '.'; e.g. "
                         f"alice/ssd-demo), got {repo_id!r}")
    return repo_id


def hardware_names() -> tuple[str, ...]:
    """The Hub's names for a Space's hardware (huggingface_hub's SpaceHardware)."""
    from huggingface_hub import SpaceHardware

    return tuple(item.value for item in SpaceHardware)


def check_hardware(name: str | None) -> str | None:
    if name is not None and name not in hardware_names():
        raise InputError(f"--hardware {name!r} is not one of the Hub's: {', '.join(hardware_names())}")
    return name


def human_size(size: int) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000 or unit == "MB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def listing(files: list[SpaceFile]) -> list[str]:
    """The dry run's lines: each file's size and path, then the total."""
    lines = [f"{human_size(f.size):>9}  {f.path}" for f in files]
    lines.append(f"{human_size(sum(f.size for f in files)):>9}  in {len(files)} files")
    return lines


def push(api, repo_id: str, root: Path, files: list[SpaceFile], private: bool = False, hardware: str | None = None,
         message: str = "Update the demo") -> str:
    """Create the Space `repo_id` (Gradio SDK) or update it, and send `files` from `root` in one commit through
    `api` (a huggingface_hub HfApi holding the token). Files the Space has under `OWNED_PREFIXES` that are no longer
    sent are deleted in the same commit. `private` makes it private (an existing Space is never made public);
    `hardware` asks for that hardware. Returns the commit's URL."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    exists = api.repo_exists(repo_id, repo_type="space")
    if not exists:
        api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, space_hardware=hardware,
                        exist_ok=True)
    else:
        if private:
            api.update_repo_settings(repo_id, private=True, repo_type="space")
        if hardware:
            api.request_space_hardware(repo_id, hardware)
    sent = {f.path for f in files}
    stale = sorted(path for path in (api.list_repo_files(repo_id, repo_type="space") if exists else [])
                   if path.startswith(OWNED_PREFIXES) and path not in sent)
    operations = [CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=str(Path(root) / f.path)) for f in files]
    operations += [CommitOperationDelete(path_in_repo=path) for path in stale]
    info = api.create_commit(repo_id, operations, commit_message=message, repo_type="space")
    return str(getattr(info, "commit_url", None) or f"https://huggingface.co/spaces/{repo_id}")
