"""What the vLLM tests share: whether the vLLM environment exists, the skip that says how to build it, and a
small-vocabulary config-true Llama pair (Llasa-1B's head layout, rotary scaling and head size; tiny width,
depth and vocabulary) saved with `save_pretrained` and a tokenizer, for exact enumeration."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from support.llasa_fixtures import llasa_config
from ssd_demo.backends.vllm.worker import vllm_python

VOCAB = 8
BOS = 0

needs_vllm = pytest.mark.skipif(
    vllm_python() is None,
    reason="no vLLM environment (.venv-vllm at the repository root, or the interpreter SSD_DEMO_VLLM_PYTHON names): "
           "build it with `bash scripts/vllm_env.sh`, as .ci/run does")


def small_tokenizer():
    """A word-level tokenizer of exactly VOCAB tokens (vLLM reads the folder's tokenizer files)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(VOCAB)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(words, unk_token="w0")),
                                   bos_token="w0", eos_token="w1")


def small_llama(seed: int, layers: int, init: float):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    config = llasa_config("1B", tiny=True, vocab_size=VOCAB, num_hidden_layers=layers, initializer_range=init,
                          bos_token_id=BOS, eos_token_id=1, pad_token_id=None)
    return LlamaForCausalLM(config).eval()


def save_small_pair(root: Path) -> tuple[Path, Path, object, object]:
    """Target (2 layers) and draft (1 layer) folders under `root`, and the two models."""
    tokenizer = small_tokenizer()
    folders, models = [], []
    for name, seed, layers in (("target", 11, 2), ("draft", 12, 1)):
        model = small_llama(seed, layers, init=0.5)
        folder = Path(root) / name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(folder)
        models.append(model)
    return folders[0], folders[1], models[0], models[1]
