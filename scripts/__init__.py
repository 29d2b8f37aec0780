"""Developer-only scripts, not shipped in the package: parity checks against official code, smoke runs,
and click / streaming timings of the app. Run from the repository root: `python -m scripts.NAME --help`."""
