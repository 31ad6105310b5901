"""Policy decisions: patterns, admin implying publish and consume, disabled identities."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tamto_common.errors import InvalidArgument
from tamto_common.policy import (
    Grant,
    IdentityKind,
    IdentityRecord,
    Permission,
    Policy,
    Role,
    binding_key,
    check_pattern,
)


def policy(*grants: Grant, disabled: bool = False) -> Policy:
    return Policy.build(
        [IdentityRecord("alice", IdentityKind.USER, 0.0, disabled)],
        [Role("r", grants)],
        [("alice", "r")],
    )


@pytest.mark.parametrize(
    ("pattern", "stream", "matches"),
    [
        ("orders", "orders", True),
        ("orders", "orders.eu", False),
        ("orders.*", "orders.eu", True),
        ("orders.*", "orders", False),
        ("orders.*", "ordersXeu", False),  # '.' is literal
        ("*", "anything-at.all", True),
        ("*.dlq", "orders.dlq", True),
        ("a*b*c", "a-x-b-y-c", True),
        ("a*b*c", "a-x-c", False),
    ],
)
def test_patterns(pattern: str, stream: str, matches: bool) -> None:
    assert (
        policy(Grant(Permission.PUBLISH, pattern)).allows("alice", Permission.PUBLISH, stream)
        is matches
    )


def test_admin_implies_publish_and_consume_but_not_the_reverse() -> None:
    admin = policy(Grant(Permission.ADMIN, "o.*"))
    assert all(admin.allows("alice", p, "o.x") for p in Permission)
    publish = policy(Grant(Permission.PUBLISH, "o.*"))
    assert not publish.allows("alice", Permission.CONSUME, "o.x")
    assert not publish.allows("alice", Permission.ADMIN, "o.x")
    assert publish.allows_any("alice", "o.x")


def test_security_admin_needs_admin_on_star_exactly() -> None:
    assert policy(Grant(Permission.ADMIN, "*")).is_security_admin("alice")
    assert not policy(Grant(Permission.ADMIN, "o*")).is_security_admin("alice")
    assert not policy(Grant(Permission.PUBLISH, "*")).is_security_admin("alice")


def test_disabled_identity_is_allowed_nothing() -> None:
    p = policy(Grant(Permission.ADMIN, "*"), disabled=True)
    assert p.disabled("alice")
    assert not p.allows("alice", Permission.PUBLISH, "x")
    assert not p.is_security_admin("alice")


def test_unknown_subjects_and_missing_roles_grant_nothing() -> None:
    p = Policy.build([], [], [("bob", "gone")])
    assert not p.allows("bob", Permission.CONSUME, "x")
    assert not p.allows("nobody", Permission.CONSUME, "x")


@pytest.mark.parametrize("pattern", ["", "a/b", "a b", "x?", "[ab]"])
def test_illegal_patterns(pattern: str) -> None:
    with pytest.raises(InvalidArgument, match="illegal stream pattern"):
        check_pattern(pattern)


def test_binding_key_encodes_subject() -> None:
    assert binding_key("r", "corp:a/b") == b"/tamto/auth/bindings/r/corp%3Aa%2Fb"


def test_role_json_round_trip() -> None:
    role = Role("r", (Grant(Permission.CONSUME, "a.*"), Grant(Permission.ADMIN, "*")))
    assert Role.from_json(role.to_json()) == role


@pytest.mark.timeout(20)
def test_a_pattern_of_many_stars_is_matched_in_polynomial_time() -> None:
    grant = Grant(Permission.CONSUME, "a*" * 60 + "b")
    assert not grant.covers(Permission.CONSUME, "a" * 255)
    assert grant.covers(Permission.CONSUME, "a" * 70 + "b")


@settings(max_examples=500, derandomize=True, deadline=None)
@given(
    pattern=st.text(alphabet="ab*", min_size=1, max_size=8),
    stream=st.text(alphabet="ab", max_size=10),
)
def test_pattern_matching_agrees_with_the_regular_expression(pattern: str, stream: str) -> None:
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    expected = re.fullmatch(regex, stream) is not None
    assert Grant(Permission.CONSUME, pattern).covers(Permission.CONSUME, stream) == expected
