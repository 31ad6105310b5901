"""Tests that need something this machine may lack (a tool such as `iptables`, root,
FUSE, an optional package): the one place that decides whether such a test skips or fails.

On a developer's machine a test whose tool is missing skips, saying what is missing.
Under `CI=true` it fails instead: `.ci/run` installs every tool the suite needs, so a
missing one is a broken CI machine, and a green run that skipped the network fault
tests would hide that they never ran.

- `needs(reason)` is a mark (for `pytestmark` or a decorator): `reason` is why the test
  cannot run here, or None when it can (the `unavailable()` helpers of
  `tamto_testing.netns` and `tamto_testing.power_loss` return one). The plugin
  (`tamto_testing.plugin`) marks such a test skipped at collection (pytest's summary
  names it), or fails it under CI before its fixtures are set up.
- `missing(reason)` does the same from inside a test or fixture.
"""

from __future__ import annotations

import os
from typing import NoReturn, overload

import pytest

#: The mark `needs` returns; registered by the plugin (`--strict-markers`).
MARK = "tamto_needs"
#: Values of CI that mean "this is CI" (GitHub, GitLab and most others set CI=true).
_TRUE = ("1", "true", "yes")


def in_ci() -> bool:
    """Whether this run is CI's (the CI environment variable is true)."""
    return os.environ.get("CI", "").strip().lower() in _TRUE


@overload
def missing(reason: str) -> NoReturn: ...
@overload
def missing(reason: str | None) -> None: ...
def missing(reason: str | None) -> None:
    """Skip the running test because of `reason` (fail it under CI=true); nothing when
    `reason` is None."""
    if reason is None:
        return
    if in_ci():
        pytest.fail(
            f"{reason} (CI=true: a test whose tool is missing fails; .ci/run installs it)",
            pytrace=False,
        )
    pytest.skip(reason)


def needs(reason: str | None) -> pytest.MarkDecorator:
    """A mark that skips the test (fails it under CI=true) when `reason` is not None."""
    return pytest.mark.tamto_needs(reason)  # MARK


def _reason(item: pytest.Item) -> str | None:
    """Why a test marked `needs` cannot run here (its first mark saying so), or None."""
    reasons = (mark.args[0] for mark in item.iter_markers(MARK) if mark.args and mark.args[0])
    return next(reasons, None)


def skip_marked(items: list[pytest.Item]) -> None:
    """Outside CI, mark each test that needs what is missing as skipped, so pytest's
    summary names the test (the plugin's `pytest_collection_modifyitems`)."""
    if in_ci():
        return
    for item in items:
        reason = _reason(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def fail_marked(item: pytest.Item) -> None:
    """Under CI, fail a test that needs what is missing, before its fixtures start
    anything (the plugin's `pytest_runtest_setup`)."""
    if in_ci():
        missing(_reason(item))
