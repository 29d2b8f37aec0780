"""The extension guide's example rule, installed as the guide says (its module and one registry line, taken from
docs/architecture.md) into a copy of the package: config, the app's menu, the flags and both decoders take it with
nothing else changed; greedy decoding with it gives the target's greedy tokens; the vLLM engine refuses it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

from support.paths import REPOSITORY

GUIDE = REPOSITORY / "docs" / "architecture.md"
SECTION = "### An acceptance rule in three files"

CHECK = textwrap.dedent('''
    import sys

    import torch

    sys.path.insert(0, TESTS)
    from support.tiny_models import tiny_llama

    import ssd_demo
    from ssd_demo import DecodingConfig, autoregressive_generate, speculative_generate
    from ssd_demo.app.compare import SETTINGS_BY_NAME
    from ssd_demo.backends.vllm.engines import VllmEngines
    from ssd_demo.errors import InputError
    from ssd_demo.rules import RULE_NAMES, RULES, AcceptanceRule, Block, make_rule

    assert ssd_demo.__file__.startswith(COPY), ssd_demo.__file__  # the copy, not the checkout
    assert RULE_NAMES == ("exact", "ssd", "topk", "pcg", "greedy")
    assert SETTINGS_BY_NAME["acceptance"].choices == RULE_NAMES  # the app's menu
    config = DecodingConfig(acceptance="greedy", temperature=0.0, max_new_tokens=24, draft_len=3)
    rule = make_rule(config)
    assert isinstance(rule, AcceptanceRule) and rule.guarantee == RULES["greedy"].guarantee

    # Its guarantee: greedy decoding with it is the target's own greedy decoding, whatever the draft.
    target, draft = tiny_llama(seed=2, vocab=8, width=16), tiny_llama(seed=3, vocab=8, width=16)
    prompt = torch.tensor([[1, 2, 3]])
    speculative = speculative_generate(target, draft, prompt, config)
    assert speculative.tokens == autoregressive_generate(target, prompt, config).tokens
    assert 0 < speculative.stats.accepted_tokens < speculative.stats.drafted_tokens  # it kept some and rejected some

    # Its three answers on a small block.
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    target_probs = torch.tensor([[0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.3, 0.3, 0.4]])
    block = Block(drafted=torch.tensor([1, 2]), draft_probs=probs, target_probs=target_probs,
                  target_scores=target_probs.log())
    assert rule.accept_probability(block).tolist() == [1.0, 1.0]
    assert torch.allclose(rule.expected_acceptance(block), torch.tensor([0.2, 0.8]))
    assert torch.equal(rule.residual(block, 1), target_probs[1])

    try:  # the vLLM engine verifies with SSD's rule only: refused by name, before any process starts
        VllmEngines.check(None, "speculative", config)
    except InputError as error:
        assert "'greedy'" in str(error), error
    else:
        raise AssertionError("the vLLM engine took a rule it cannot verify")
    print("ok")
''')


def _blocks(text: str) -> list[str]:
    """The ```python blocks of the guide's section on a new rule, in order."""
    section = text[text.index(SECTION):]
    section = section[: section.index("\n### ", len(SECTION))]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_the_guides_example_rule_needs_one_module_and_one_registry_line(tmp_path):
    module, entry = _blocks(GUIDE.read_text(encoding="utf-8"))
    copy = tmp_path / "ssd_demo"
    shutil.copytree(REPOSITORY / "ssd_demo", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "rules" / "greedy.py").write_text(module, encoding="utf-8")
    registry = copy / "rules" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    end = text.index("\n)}\n", text.index("RULES: dict[str, RuleSpec]"))  # the end of the RULES list
    registry.write_text(text[:end] + "\n" + entry.rstrip("\n") + text[end:], encoding="utf-8")

    script = tmp_path / "check.py"
    script.write_text(f"TESTS = {str(REPOSITORY / 'tests')!r}\nCOPY = {str(copy)!r}\n" + CHECK, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    flags = subprocess.run([sys.executable, "-m", "ssd_demo", "synth", "--help"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert "exact, ssd, topk, pcg, greedy" in " ".join(flags.stdout.split()), flags.stdout
