"""Expressions in function specs: SQL text parsed once into Polars expressions.

Polars' SQL expression parser is maintained, covers comparisons, boolean logic,
arithmetic, `IS NULL`, `IN`, `LIKE` and casts, and yields expressions that run as
columnar kernels. A parse failure is the spec's fault: `InvalidArgument` naming
where in the spec, at deploy.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tamto_common.errors import InvalidArgument


def expression(where: str, text: Any) -> pl.Expr:
    """An SQL expression as a Polars one, or `InvalidArgument` naming where and why."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"{where}: an expression is a non-empty string")
    try:
        return pl.sql_expr(text)
    except Exception as exc:  # Polars raises several kinds for a bad expression
        raise InvalidArgument(f"{where}: invalid expression {text!r}: {_short(exc)}") from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
