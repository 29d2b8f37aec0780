import pytest

from ssd_demo import DecodingConfig


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"draft_len": 0}, "draft_len"),
        ({"beta": -0.1}, "beta"),
        ({"beta": float("nan")}, "beta"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": -2}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"seed": -3}, "seed"),
        ({"acceptance": "magic"}, "acceptance"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
    ],
)
def test_invalid_settings_raise_clear_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(**changes)


def test_eos_ids_and_copies():
    config = DecodingConfig(eos_token_id=[3, 5], allowed_token_ids=[1, 3, 5])
    assert config.eos_ids == (3, 5)
    assert DecodingConfig(eos_token_id=7).eos_ids == (7,)
    assert DecodingConfig().eos_ids == ()
    changed = config.with_(beta=0.3)
    assert changed.beta == 0.3 and config.beta == 0.0
    assert changed.allowed_token_ids == (1, 3, 5)
    assert DecodingConfig(temperature=0).greedy
