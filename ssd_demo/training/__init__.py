"""Reproducible data + training recipe for the embedded voice (`python -m ssd_demo train`)."""
