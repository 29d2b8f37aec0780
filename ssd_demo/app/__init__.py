"""The web app: the page (`page.build_demo`), request admission (`jobs`), errors shown as messages
(`errors`), and one folder per tab (`compare`, `listening`, `benchmark`).

The app calls the library's public API as a user would; the library and the command line (`cli/`) never
import it, nor it them.
"""
