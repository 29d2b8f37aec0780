"""Where the tolerance rule enters vLLM 0.32, in three places:

- `SamplingParams._verify_extra_args`: a request's `ssd_beta` is checked where vLLM checks its arguments, so
  a bad value is the request's error (HTTP 400 in vLLM's server), never the engine's;
- the V1 model runner's persistent batch (`gpu_input_batch.InputBatch`, CPU and CUDA alike): it keeps each
  request's beta and hands the batch's betas, one per row, to the sampler with the sampling metadata it
  rebuilds whenever the batch changes (`SamplingMetadata.ssd_beta`);
- `vllm.v1.sample.rejection_sampler.rejection_sample`, the function `RejectionSampler.forward` calls for every
  verify step. Its kernels are Triton on a GPU and C++ on a CPU; the replacement is torch, so it runs on both;
- the draft model's sampling (`llm_base_proposer.compute_probs_and_sample_next_token`), which in vLLM 0.32
  ignores the requests' seeds ("TODO: Consider seeds"), so a seeded speculative request's tokens depended on what
  the engine had run before: a seeded request's draft now draws from that request's own generator.
"""

from __future__ import annotations

import torch

from . import BETA_ARGUMENT, request_beta
from .tolerance import tolerance_sample

_installed: dict = {}


def install(default_beta: float) -> None:
    """Carry every request's beta (`default_beta` when it names none) to the rejection step (idempotent)."""
    _installed["default"] = default_beta
    if _installed.get("done"):
        return
    _check_request_beta()
    _carry_request_beta()
    _replace_rejection_step()
    _seed_the_draft()
    _refuse_v2_runner()
    _installed["done"] = True


def _check_request_beta() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams

    original = SamplingParams._verify_extra_args

    def _verify_extra_args(self) -> None:
        original(self)
        try:
            request_beta(self.extra_args, 0.0)
        except ValueError as error:
            raise VLLMValidationError(str(error), parameter=BETA_ARGUMENT) from None

    SamplingParams._verify_extra_args = _verify_extra_args


def _carry_request_beta() -> None:
    """InputBatch keeps {request id: beta}; each SamplingMetadata it builds gets `ssd_beta` ([rows] float64 on
    the batch's device, in the batch's row order) and `ssd_tolerant` (any row > 0, a Python bool: the sampler
    decides its path without reading the device)."""
    from vllm.v1.worker.gpu_input_batch import InputBatch

    add, remove, make = InputBatch.add_request, InputBatch.remove_request, InputBatch._make_sampling_metadata

    def betas(batch) -> dict:
        if "_ssd_betas" not in batch.__dict__:
            batch._ssd_betas = {}
        return batch._ssd_betas

    def add_request(self, request):
        index = add(self, request)
        params = request.sampling_params
        extra = getattr(params, "extra_args", None) if params is not None else None
        betas(self)[request.req_id] = request_beta(extra, _installed["default"])
        return index

    def remove_request(self, req_id):
        betas(self).pop(req_id, None)
        return remove(self, req_id)

    def _make_sampling_metadata(self):
        metadata = make(self)
        table, default = betas(self), _installed["default"]
        rows = [table.get(req_id, default) for req_id in self._req_ids[:self.num_reqs]]
        metadata.ssd_beta = torch.tensor(rows, dtype=torch.float64).to(self.device, non_blocking=True)
        metadata.ssd_tolerant = any(beta > 0.0 for beta in rows)
        return metadata

    InputBatch.add_request, InputBatch.remove_request = add_request, remove_request
    InputBatch._make_sampling_metadata = _make_sampling_metadata


def _replace_rejection_step() -> None:
    from vllm.v1.sample import rejection_sampler as module

    original = module.rejection_sample

    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=False,
                         synthetic_conditional_rates=None, use_fp64_gumbel=False):
        args = (draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_logits,
                bonus_token_ids, sampling_metadata)
        tolerant = getattr(sampling_metadata, "ssd_tolerant", _installed["default"] > 0.0)
        if not tolerant or sampling_metadata.all_greedy:  # beta 0 everywhere, or greedy (beta does not apply)
            return original(*args, synthetic_mode=synthetic_mode,
                            synthetic_conditional_rates=synthetic_conditional_rates, use_fp64_gumbel=use_fp64_gumbel)
        if synthetic_mode:
            raise RuntimeError("a request's ssd_beta does not combine with rejection_sample_method='synthetic'")
        # Mixed batch: vLLM's own pass decides the greedy rows; the random rows are redone below.
        mixed = not sampling_metadata.all_random
        output = original(*args, use_fp64_gumbel=use_fp64_gumbel) if mixed else None
        uniforms = module.generate_uniform_probs(draft_token_ids.shape[0], num_draft_tokens,
                                                 sampling_metadata.generators, target_logits.device)
        ours = tolerance_sample(draft_token_ids, num_draft_tokens, max_spec_len, draft_probs, target_logits,
                                bonus_token_ids, sampling_metadata.generators,
                                _token_betas(sampling_metadata, num_draft_tokens, draft_token_ids), uniforms)
        if output is None:
            return ours
        random_rows = sampling_metadata.temperature != module.GREEDY_TEMPERATURE
        return torch.where(random_rows[:, None], ours, output)

    module.rejection_sample = rejection_sample


def _token_betas(sampling_metadata, num_draft_tokens: list[int], drafted: torch.Tensor) -> torch.Tensor:
    """[N] each drafted token's beta: its request's row, repeated over that request's drafted tokens."""
    rows = getattr(sampling_metadata, "ssd_beta", None)
    if rows is None:
        rows = torch.full((len(num_draft_tokens),), _installed["default"], dtype=torch.float64)
    counts = torch.as_tensor(num_draft_tokens, dtype=torch.long)
    return rows.to(drafted.device).repeat_interleave(counts.to(drafted.device), output_size=drafted.shape[0])


def _seed_the_draft() -> None:
    """The draft's sampling as vLLM 0.32 does it (temperature only, the exponential race), with each seeded
    request's noise drawn from its own generator. Rows are requests (the draft-model method drafts one token per
    request per call); any other layout keeps vLLM's own function."""
    from vllm.v1.sample.ops.topk_topp_sampler import empty_exponential_noise_like, sample_with_exponential_noise
    from vllm.v1.spec_decode import llm_base_proposer as module

    original = module.compute_probs_and_sample_next_token

    def compute_probs_and_sample_next_token(logits, sampling_metadata, use_fp64_gumbel=False):
        rows = getattr(sampling_metadata, "ssd_beta", None)
        generators = sampling_metadata.generators
        if (sampling_metadata.all_greedy or not generators or rows is None
                or logits.shape[0] != rows.shape[0] or sampling_metadata.temperature is None):
            return original(logits, sampling_metadata, use_fp64_gumbel)
        temperature, greedy = sampling_metadata.temperature, None
        if not sampling_metadata.all_random:
            greedy = temperature < module._SAMPLING_EPS
            temperature = torch.where(greedy, 1.0, temperature)
        logits.div_(temperature.view(-1, 1))
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        noise = empty_exponential_noise_like(probs, use_fp64_gumbel).exponential_()
        for row, generator in generators.items():
            if row < noise.shape[0]:
                noise[row].exponential_(generator=generator)
        tokens = sample_with_exponential_noise(probs.clone(), noise)
        if greedy is not None:
            tokens = torch.where(greedy, probs.argmax(dim=-1), tokens)
        return tokens, probs

    module.compute_probs_and_sample_next_token = compute_probs_and_sample_next_token


def _refuse_v2_runner() -> None:
    """The V2 model runner verifies with its own kernels: a speculative engine fails at start there rather than
    run the exact rule for requests that asked for beta."""
    try:
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler as v2
    except Exception:  # not importable on this platform (e.g. no Triton): the V2 runner cannot run here either
        return
    original_init = v2.RejectionSampler.__init__

    def refuse(self, *args, **kwargs):
        raise RuntimeError("ssd-vllm-plugin needs vLLM's V1 model runner for speculative decoding: "
                           "set VLLM_USE_V2_MODEL_RUNNER=0")

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
