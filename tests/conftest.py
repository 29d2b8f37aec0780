"""Shared test setup: offline, deterministic, small thread count."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Listening-test databases and stimulus sets go to a throwaway folder, never into the checkout.
os.environ.setdefault("SSD_DEMO_DATA_DIR", tempfile.mkdtemp(prefix="ssd-demo-test-data-"))
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# This machine's measured costs (ssd_demo/engine/machine_cache.py) are neither read from nor written to the user's
# cache: every test measures as a first run would; the cache's own tests point it at a temporary folder.
os.environ["SSD_DEMO_CACHE"] = "off"
# Settings a developer may have exported for the app would change which code the tests run.
for _setting in ("SSD_DEMO_MATMUL", "SSD_DEMO_STATIC_CACHE"):
    os.environ.pop(_setting, None)

import torch  # noqa: E402

# Tiny models are dominated by per-call overhead; one thread is fastest and leaves a core free.
torch.set_num_threads(1)

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts on one thread, whatever an earlier test (or the app's thread policy) set."""
    torch.set_num_threads(1)
    yield


#: Kinds of test left out of the quick run: a test of one of these kinds is also `slow`, so that
#: `pytest -m "not slow"` leaves it out; test files only say which kind they are.
SLOW_KINDS = ("stats", "server", "browser", "train", "vllm")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects, so that "not slow" sees the added mark
def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("slow") is None and any(item.get_closest_marker(kind) for kind in SLOW_KINDS):
            item.add_marker(pytest.mark.slow)
