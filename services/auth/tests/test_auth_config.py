"""Auth settings: defaults, the development key from the environment, no secret in repr."""

from __future__ import annotations

from pathlib import Path

import pytest

from tamto_auth.config import AuthConfig
from tamto_common.apikeys import new_api_key
from tamto_common.config import load_config
from tamto_common.errors import ConfigError


def test_defaults() -> None:
    config = load_config(AuthConfig, "auth", [], environ={})
    assert config.data_dir == Path(".tamto/data")
    assert config.signing_keys_dir == Path(".tamto/data/auth/signing-keys")
    assert config.token_ttl_s == 900
    assert (config.issuer, config.audience) == ("tamto", "tamto")
    assert config.dev_api_key == ""
    assert config.dev_subject == "dev"


def test_dev_key_from_environment_stays_out_of_repr() -> None:
    key = str(new_api_key())
    config = load_config(AuthConfig, "auth", [], environ={"TAMTO_AUTH_DEV_API_KEY": key})
    assert config.dev_api_key == key
    assert key not in repr(config)


def test_malformed_dev_key_is_refused_without_echoing_it() -> None:
    bad = "tamto_0123456789ab_has_underscores_and_is_long_enough_to_matter"
    with pytest.raises(ConfigError) as info:
        load_config(AuthConfig, "auth", [], environ={"TAMTO_AUTH_DEV_API_KEY": bad})
    assert "dev-api-key" in str(info.value)
    assert bad not in str(info.value)


@pytest.mark.parametrize(
    "argv", [["--token-ttl-s", "0"], ["--issuer", ""], ["--audience", " "], ["--dev-subject", ""]]
)
def test_bad_settings_are_refused(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        load_config(AuthConfig, "auth", argv, environ={})
