"""Old SDK names kept for one release: each use warns with the name to use instead.

The vocabulary the SDK settled on, and every old name's replacement, is the table
in docs/sdk.md ("Names"). Aliases call this module so every warning reads alike.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["renamed", "renamed_argument", "renamed_method"]

T = TypeVar("T")
P = ParamSpec("P")


def renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that `old` is deprecated in favour of `new` (removed in the next release)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release: use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def renamed_method(method: Callable[P, T], old: str) -> Callable[P, T]:
    """`method` under its old name `old` (``"Class.name"``), warning on each call.

    In a class body: ``publish = renamed_method(send, "EphemeralProducer.publish")``.
    """
    new = f"{old.rpartition('.')[0]}.{method.__name__}"

    @functools.wraps(method)
    def alias(*args: P.args, **kwargs: P.kwargs) -> T:
        renamed(old, new)
        return method(*args, **kwargs)

    alias.__doc__ = f"Deprecated name of `{method.__name__}`."
    return alias


def renamed_argument(
    function: str, old: str, old_value: T | None, new: str, new_value: T, default: T
) -> T:
    """The value of argument `new`, taking deprecated `old` (with a warning) when given.

    Giving both is a `TypeError`, as for any argument given twice.
    """
    if old_value is None:
        return new_value
    if new_value != default:
        raise TypeError(f"{function}() got both {old}= and {new}=; give {new}= only")
    renamed(f"{function}({old}=...)", f"{function}({new}=...)", stacklevel=4)
    return old_value
