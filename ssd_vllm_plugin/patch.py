"""Where the tolerance rule enters vLLM 0.32: `vllm.v1.sample.rejection_sampler.rejection_sample`, the function
`RejectionSampler.forward` calls for every verify step of the V1 model runner (CPU and CUDA alike). Its kernels
are Triton on a GPU and C++ on a CPU; the replacement below is torch, so it runs on both."""

from __future__ import annotations

import torch

from .tolerance import tolerance_sample

_installed: dict = {}


def install(beta: float) -> None:
    """Replace vLLM's rejection step by the tolerance rule for random requests (idempotent)."""
    from vllm.v1.sample import rejection_sampler as module

    if _installed.get("module") is module:
        _installed["beta"] = beta
        return
    original = module.rejection_sample
    _installed.update(module=module, beta=beta, original=original)

    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=False,
                         synthetic_conditional_rates=None, use_fp64_gumbel=False):
        args = (draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits,
                bonus_token_ids, sampling_metadata)
        if synthetic_mode:
            raise RuntimeError("SSD_VLLM_BETA does not combine with rejection_sample_method='synthetic'")
        if sampling_metadata.all_greedy:  # beta does not apply to greedy decoding
            return original(*args, use_fp64_gumbel=use_fp64_gumbel)
        # Mixed batch: vLLM's own pass decides the greedy rows; the random rows are redone below.
        mixed = not sampling_metadata.all_random
        output = original(*args, use_fp64_gumbel=use_fp64_gumbel) if mixed else None
        uniforms = module.generate_uniform_probs(draft_token_ids.shape[0], num_draft_tokens,
                                                 sampling_metadata.generators, target_logits.device)
        ours = tolerance_sample(draft_token_ids, num_draft_tokens, max_spec_len, draft_probs, target_logits,
                                bonus_token_ids, sampling_metadata.generators, _installed["beta"], uniforms)
        if output is None:
            return ours
        random_rows = sampling_metadata.temperature != module.GREEDY_TEMPERATURE
        return torch.where(random_rows[:, None], ours, output)

    module.rejection_sample = rejection_sample
    _refuse_v2_runner()


def _refuse_v2_runner() -> None:
    """The V2 model runner verifies with its own kernels: fail at engine start rather than run the exact rule."""
    try:
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler as v2
    except Exception:  # not importable on this platform (e.g. no Triton): the V2 runner cannot run here either
        return
    original_init = v2.RejectionSampler.__init__

    def refuse(self, *args, **kwargs):
        raise RuntimeError("SSD_VLLM_BETA > 0 needs vLLM's V1 model runner: set VLLM_USE_V2_MODEL_RUNNER=0")

    if getattr(original_init, "__name__", "") != "refuse":
        v2.RejectionSampler.__init__ = refuse


def fix_cpu_expand() -> None:
    """vLLM 0.32 on a CPU: the C++ stand-in for `expand_kernel` converts its output tensor to int64 and writes
    into that copy, so `expand_batch_to_tokens` returns uninitialised memory for float tensors. The verify step
    then divides the target's logits by garbage per-token temperatures (and reads garbage top-k/top-p), and the
    speculative output is not the target's distribution. Replaced by the same expansion in torch, on CPU only."""
    from vllm.platforms import current_platform
    from vllm.v1.sample import rejection_sampler as module

    if not current_platform.is_cpu() or getattr(module.expand_batch_to_tokens, "__name__", "") == "expand_in_torch":
        return

    def expand_in_torch(x: torch.Tensor, cu_num_tokens: torch.Tensor, num_tokens: int, replace_from: int = 0,
                        replace_to: int = 0) -> torch.Tensor:
        counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
        expanded = x.repeat_interleave(counts, output_size=num_tokens)
        return torch.where(expanded == replace_from, torch.full_like(expanded, replace_to), expanded)

    module.expand_batch_to_tokens = expand_in_torch
