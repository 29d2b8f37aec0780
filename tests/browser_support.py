"""Headless Chromium settings shared by the browser tests (Debian's chromium, driven by Playwright)."""

import shutil

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# A closed network: without these flags Chromium keeps trying to reach update and sync services.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
