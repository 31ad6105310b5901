"""Inclusive offset ranges, as acks and cursors carry them: the one way clients and
servers put a list of them in order."""

from __future__ import annotations

from collections.abc import Iterable


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive `ranges` sorted, with those that overlap or touch merged: O(k log k)
    for k ranges."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            if last > merged[-1][1]:
                merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
    return merged
