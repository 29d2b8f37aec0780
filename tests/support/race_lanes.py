"""The race's lane workers in tests: voices registered in the tests' own process race one lane after the other,
and a test that started a built-in voice's workers closes them.

The race's lane workers (`ssd_demo.comparison.lanes`) are spawned processes that load the preset by its key from
the registry; a voice a test registers (the toy voice, a preset standing in for another) exists only in the
test's process, so its workers could never start (each race would wait for two processes to spawn and fail, and
a stand-in's workers would load the real models). Races of such voices take the one-after-the-other path, which
says why (`Race.apart`); the lanes' concurrency is tested on the embedded voice, a built-in preset.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

import pytest

#: Why a race of a voice registered in the tests decodes one lane after the other (what `Race.apart` says).
IN_TESTS_ONLY = "this voice is registered in the tests' process only"


@contextmanager
def lanes_one_after_the_other(keys: Collection[str] | None = None, reason: str = IN_TESTS_ONLY) -> Iterator[str]:
    """Every race started meanwhile (and the start-up job) of a preset in `keys` (None: of every preset) decodes
    its lanes one after the other, saying `reason`; other presets' races decide as the app does."""
    from ssd_demo.comparison import pipeline, startup

    with pytest.MonkeyPatch.context() as patch:
        for module in (pipeline, startup):
            decide = module.concurrent_lanes

            def apart(synthesizer, preset, in_gpu_worker, decide=decide) -> str:
                if keys is None or preset.key in keys:
                    return reason
                return decide(synthesizer, preset, in_gpu_worker)

            patch.setattr(module, "concurrent_lanes", apart)
        yield reason


def close_lane_workers(preset_key: str) -> None:
    """Close this process's lane workers of `preset_key`, when a race or the start-up job started them."""
    from ssd_demo.comparison import lanes

    workers = lanes._workers.pop(preset_key, None)
    if workers is not None:
        workers.close()
