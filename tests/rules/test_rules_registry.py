"""The rule registry is the one list of rule names: config validation, the app's menu and help read it."""

import pytest

from ssd_demo import DecodingConfig
from ssd_demo.config import ACCEPTANCE_RULES
from ssd_demo.rules import RULE_NAMES, RULES, AcceptanceRule, make_rule
from ssd_demo.app.compare import SETTINGS_BY_NAME
from ssd_demo.app.compare.settings import control_info
from support.tiny_models import tiny_llama


def test_config_and_app_read_the_registry():
    assert ACCEPTANCE_RULES == RULE_NAMES == ("exact", "ssd", "topk", "pcg")
    acceptance = SETTINGS_BY_NAME["acceptance"]  # the app's menu and its help text
    assert acceptance.choices == RULE_NAMES
    assert all(control_info(acceptance, name) == RULES[name].help != "" for name in RULE_NAMES)
    with pytest.raises(ValueError, match="acceptance must be one of exact, ssd, topk, pcg"):
        DecodingConfig(acceptance="nope")


@pytest.mark.parametrize("name", RULE_NAMES)
def test_every_registered_rule_builds_and_states_its_guarantee(name):
    embeddings = tiny_llama(seed=1, vocab=8, width=16).get_input_embeddings().weight
    rule = make_rule(DecodingConfig(acceptance=name), embeddings=embeddings)
    assert isinstance(rule, AcceptanceRule)
    assert rule.name == name and rule.guarantee == RULES[name].guarantee


def test_a_rule_handed_in_must_be_the_one_the_config_names():
    import torch

    from ssd_demo import speculative_generate

    target, draft = tiny_llama(seed=2, vocab=8, width=16), tiny_llama(seed=3, vocab=8, width=16)
    config = DecodingConfig(acceptance="ssd", beta=0.3, max_new_tokens=4)
    with pytest.raises(ValueError, match="rule handed in is 'exact'"):
        speculative_generate(target, draft, torch.tensor([[1, 2]]), config, rule=make_rule(config.with_(acceptance="exact")))
    handed = speculative_generate(target, draft, torch.tensor([[1, 2]]), config, rule=make_rule(config))
    assert handed.tokens == speculative_generate(target, draft, torch.tensor([[1, 2]]), config).tokens


def test_only_the_ssd_rule_reads_beta_and_exact_stays_exact_at_any_beta():
    import torch

    from ssd_demo.rules import Block

    assert [name for name in RULE_NAMES if RULES[name].uses_beta] == ["ssd"]
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    target = torch.tensor([[0.2, 0.5, 0.3], [0.3, 0.3, 0.4], [0.3, 0.3, 0.4]])
    block = Block(drafted=torch.tensor([0, 2]), draft_probs=probs, target_probs=target, target_scores=target.log())
    exact = make_rule(DecodingConfig(acceptance="exact", beta=0.7))
    assert exact.config.beta == 0.7  # built from the config as it is: nothing rewritten behind the caller's back
    assert torch.equal(exact.accept_probability(block),
                       make_rule(DecodingConfig(acceptance="exact", beta=0.0)).accept_probability(block))
    assert not torch.equal(make_rule(DecodingConfig(acceptance="ssd", beta=0.7)).accept_probability(block),
                           exact.accept_probability(block))
