"""Shared test setup: offline, deterministic, small thread count."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import torch  # noqa: E402

# Tiny models are dominated by per-call overhead; one thread is fastest and leaves a core free.
torch.set_num_threads(1)
