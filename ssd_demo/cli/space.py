"""`python -m ssd_demo space push OWNER/NAME`: the demo as a Hugging Face Space, created or updated in one commit.

    python -m ssd_demo space push alice/ssd-demo --dry-run            # the files and their sizes; nothing sent
    python -m ssd_demo space push alice/ssd-demo                      # needs a token: HF_TOKEN or `hf auth login`
    python -m ssd_demo space push alice/ssd-demo --private --hardware cpu-upgrade

Which files go, and how, is `ssd_demo.hosting.space`'s; this module reads the flags, the token and prints.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import InputError

#: The checkout this package lies in: where app.py, README.md and assets/ are.
CHECKOUT = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    push = actions.add_parser("push", help="create or update the Space OWNER/NAME with the demo's files",
                              description="Create the Gradio Space OWNER/NAME, or update it, with exactly the files "
                                          "the demo needs (app.py, requirements.txt, README.md, ssd_demo/, "
                                          "assets/embedded/), in one commit; large files go through the Hub's "
                                          "large-file storage. Needs a token with write access: HF_TOKEN or "
                                          "`hf auth login`.")
    push.add_argument("repo_id", metavar="OWNER/NAME", help="the Space, e.g. alice/ssd-demo")
    push.add_argument("--hardware", default=None, metavar="NAME",
                      help="ask for this hardware (the Hub's names, e.g. cpu-basic, cpu-upgrade, zero-a10g, t4-small; "
                           "default: the Hub's, cpu-basic for a new Space, unchanged for an existing one)")
    push.add_argument("--private", action="store_true",
                      help="make the Space private (an existing Space is never made public by a push)")
    push.add_argument("--dry-run", action="store_true",
                      help="print the files that would be sent, their sizes and the total; no network, no token")
    push.add_argument("--message", default="Update the demo", help="the commit message (default: %(default)s)")
    push.add_argument("--root", type=Path, default=CHECKOUT,
                      help="the checkout to send from (default: the one this package is in)")


def main(args: argparse.Namespace) -> int:
    from ..hosting.space import check_hardware, check_repo_id, human_size, listing, push, space_files

    repo_id = check_repo_id(args.repo_id)
    hardware = check_hardware(args.hardware)
    files = space_files(args.root)
    if args.dry_run:
        print("\n".join(listing(files)))
        print(f"dry run: nothing sent (would push to https://huggingface.co/spaces/{repo_id})")
        return 0
    api = _api()
    try:
        url = push(api, repo_id, args.root, files, private=args.private, hardware=hardware, message=args.message)
    except OSError as error:  # the Hub's HTTP errors are OSErrors too: refused, not found, unreachable
        raise InputError(f"the push to {repo_id} failed: {_first_line(error)}") from None
    print(f"pushed {len(files)} files ({human_size(sum(f.size for f in files))}) to "
          f"https://huggingface.co/spaces/{repo_id} ({url})")
    return 0


def _api():
    """An HfApi holding the user's token; InputError without one (the token itself is never printed)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise InputError("HF_HUB_OFFLINE is set: unset it to push to the Hub")
    from huggingface_hub import HfApi, get_token

    token = get_token()
    if not token:
        raise InputError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a token with write access)")
    return HfApi(token=token)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
