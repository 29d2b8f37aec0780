"""Pre-flight checks on a model's small files, before any weights move: is it a causal LM transformers
can build natively (never running a repository's own code unasked), does its config read, does its
tokenizer load. `ssd_demo.models.hub` resolves the files; `ssd_demo.models.weights` loads the weights.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelLoadError, ModelNotFoundError, NotACausalLMError


def read_config(folder: Path, ref: str) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelNotFoundError(f"{ref}: no config.json (is this a transformers model folder?)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ModelLoadError(f"{ref}: config.json is not valid JSON ({error})") from None


def check_causal_lm(config: dict, ref: str, trust_remote_code: bool = False) -> None:
    """Raise NotACausalLMError unless transformers can build a causal LM from `config` natively."""
    # transformers loads here, where a model is checked, not where the list of presets is (a command's --help)
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type not in CONFIG_MAPPING:
        if config.get("auto_map") and not trust_remote_code:
            raise ModelLoadError(
                f"{ref} needs custom code from its repository (model type {model_type!r}); it is not run "
                "unless you pass trust_remote_code=True after reading that code"
            )
        if not config.get("auto_map"):
            raise NotACausalLMError(f"{ref}: unknown model type {model_type!r} for this transformers version")
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        if architectures and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
            raise NotACausalLMError(f"{ref} is a {', '.join(architectures)}, not a causal language model")
        return
    if not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        kind = ", ".join(architectures) or model_type
        raise NotACausalLMError(f"{ref} is a {kind} model, not a causal language model (e.g. LlamaForCausalLM)")


def load_tokenizer(folder: Path, ref: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{ref}: its tokenizer cannot be loaded ({error})") from None


def vocab_size_of(config: dict) -> int | None:
    return config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")


#: How many names an error message shows of a longer list.
SHOWN_NAMES = 3


def some_names(items: list, what: str) -> str:
    """'5 tokens only in the draft (a, b, c, ...)': a count and the first few names."""
    shown = ", ".join(str(item) for item in items[:SHOWN_NAMES])
    return f"{len(items)} {what} ({shown}{', ...' if len(items) > SHOWN_NAMES else ''})"
