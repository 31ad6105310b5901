"""Rules for names users choose: streams and subscriptions."""

from __future__ import annotations

import re

from tamto_common.errors import InvalidArgument

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_NAME_LENGTH = 128


def check_name(kind: str, name: str) -> str:
    """Return `name` if it is a legal stream or subscription name, else raise InvalidArgument.

    Legal: 1-128 characters, letters, digits, `.`, `_`, `-`, starting with a letter
    or digit. The rule keeps names safe as etcd keys and as directory names.
    """
    if not name:
        raise InvalidArgument(f"{kind} name must not be empty")
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"illegal {kind} name {name[:200]!r}: use 1-{MAX_NAME_LENGTH} letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return name


def check_cursor_name(name: str) -> str:
    """Return `name` if it names a subscription's cursor: a subscription name, or a
    multicast consumer's own cursor "<subscription>~<consumer>" (both legal names)."""
    for part in name.split("~", 1):
        check_name("subscription", part)
    return name


def consumer_label(name: str, address: str) -> str:
    """How a message names a consumer: its chosen name, else where it connected from."""
    if name:
        return repr(name)
    return f"an unnamed consumer at {address}" if address else "an unnamed consumer"
