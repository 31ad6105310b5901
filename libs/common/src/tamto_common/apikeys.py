"""Tamto API keys: `tamto_<key_id>_<secret>`, made and parsed in one place.

- `key_id`: 12 lowercase hex characters. Public: it names the key's record in
  the auth service and is safe to log.
- `secret`: 43 characters of `[A-Za-z0-9]` (about 256 random bits). Never logged
  or stored in clear; only its salted hash leaves the client.

The secret's alphabet has no `_`, so the key splits on `_` into exactly three
parts, and the whole key selects with one double-click in a terminal.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass, field

from tamto_common.errors import InvalidArgument, Unauthenticated

PREFIX = "tamto"
KEY_ID_HEX_CHARS = 12
SECRET_CHARS = 43
_ALPHABET = string.ascii_letters + string.digits
# 32 characters floor matches older or foreign-made keys; 128 ceiling bounds the
# work a hostile caller can make the server's key hashing do.
_PATTERN = re.compile(r"tamto_([0-9a-f]{12})_([A-Za-z0-9]{32,128})")
_KEY_ID = re.compile(r"[0-9a-f]{12}")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A parsed API key. `str()` gives the full key; `repr()` and `redacted()` hide the secret."""

    key_id: str
    secret: str = field(repr=False)

    def __str__(self) -> str:
        return f"{PREFIX}_{self.key_id}_{self.secret}"

    def redacted(self) -> str:
        """The key with its secret masked, fit for logs and error messages."""
        return f"{PREFIX}_{self.key_id}_****"


def new_api_key() -> ApiKey:
    """A fresh random API key."""
    key_id = secrets.token_hex(KEY_ID_HEX_CHARS // 2)
    secret = "".join(secrets.choice(_ALPHABET) for _ in range(SECRET_CHARS))
    return ApiKey(key_id=key_id, secret=secret)


def parse_api_key(text: str) -> ApiKey:
    """Parse `tamto_<key_id>_<secret>`; raises `Unauthenticated("malformed API key")`.

    The message never echoes the input: it may be a real key pasted in the wrong place.
    """
    match = _PATTERN.fullmatch(text)
    if match is None:
        raise Unauthenticated("malformed API key")
    return ApiKey(key_id=match.group(1), secret=match.group(2))


def check_key_id(key_id: str, field: str = "key_id") -> str:
    """`key_id` if it is one (12 lowercase hex characters), else `InvalidArgument`
    naming `field`. The message gives the length only: the text may be a whole key
    pasted in the wrong place."""
    if _KEY_ID.fullmatch(key_id) is None:
        raise InvalidArgument(
            f"{field} must be {KEY_ID_HEX_CHARS} lowercase hex characters (the part of "
            f"a key after {PREFIX}_), got {len(key_id)} characters that are not"
        )
    return key_id


def is_api_key(text: str) -> bool:
    """Whether `text` is a well-formed API key."""
    return _PATTERN.fullmatch(text) is not None
