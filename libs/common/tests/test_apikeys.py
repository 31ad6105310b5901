"""API keys: generated keys round-trip, malformed text is refused, secrets stay hidden."""

from __future__ import annotations

import pytest

from tamto_common.apikeys import ApiKey, is_api_key, new_api_key, parse_api_key
from tamto_common.errors import Unauthenticated


def test_new_key_round_trips_through_its_text() -> None:
    key = new_api_key()
    text = str(key)
    assert text == f"tamto_{key.key_id}_{key.secret}"
    assert parse_api_key(text) == key
    assert is_api_key(text)


def test_new_key_shape() -> None:
    key = new_api_key()
    assert len(key.key_id) == 12
    assert all(c in "0123456789abcdef" for c in key.key_id)
    assert len(key.secret) >= 32
    assert key.secret.isalnum()
    assert "_" not in key.secret


def test_new_keys_differ() -> None:
    keys = {str(new_api_key()) for _ in range(50)}
    assert len(keys) == 50


def test_secret_hidden_from_repr_and_redacted() -> None:
    key = new_api_key()
    assert key.secret not in repr(key)
    assert key.secret not in key.redacted()
    assert key.key_id in key.redacted()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "tamto",
        "tamto__",
        "tamto_0123456789ab_",
        "tamto_0123456789ab_short",
        "tamto_0123456789AB_" + "a" * 43,  # key id must be lowercase hex
        "tamto_0123456789a_" + "a" * 43,  # key id too short
        "tamto_0123456789abc_" + "a" * 43,  # key id too long
        "tamto_0123456789ab_" + "a" * 20 + "_" + "a" * 22,  # '_' in secret
        "tamto_0123456789ab_" + "a" * 42 + "-",
        "tamto_0123456789ab_" + "a" * 129,  # over the length cap
        "other_0123456789ab_" + "a" * 43,
        " tamto_0123456789ab_" + "a" * 43,
        "tamto_0123456789ab_" + "a" * 43 + "\n",
    ],
)
def test_malformed_keys_are_refused(text: str) -> None:
    with pytest.raises(Unauthenticated, match=r"^malformed API key$"):
        parse_api_key(text)
    assert not is_api_key(text)


def test_parse_accepts_minimum_secret_length() -> None:
    key = parse_api_key("tamto_0123456789ab_" + "A1" * 16)
    assert key == ApiKey(key_id="0123456789ab", secret="A1" * 16)


def test_keys_are_frozen() -> None:
    key = new_api_key()
    with pytest.raises(AttributeError):
        key.secret = "x"  # type: ignore[misc]
