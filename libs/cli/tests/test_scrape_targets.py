"""`tamto scrape-targets` labels each member's metrics address with its service and
instance, the labels the alert rules and dashboards group by."""

from __future__ import annotations

from tamto_cli.scrape_targets import target_groups
from tamto_common.membership import Member


def member(service: str, instance: str, metrics: str) -> Member:
    return Member(service, instance, "127.0.0.1:1", metrics, "0.1.0", 1, 0.0)


def test_each_member_is_a_target_labelled_with_its_service_and_instance() -> None:
    groups = target_groups(
        [
            member("storage", "storage-2", "127.0.0.1:9102"),
            member("gateway", "gateway-1", "127.0.0.1:9001"),
            member("storage", "storage-1", "127.0.0.1:9101"),
        ]
    )
    assert groups == [
        {"targets": ["127.0.0.1:9001"], "labels": {"job": "gateway", "instance": "gateway-1"}},
        {"targets": ["127.0.0.1:9101"], "labels": {"job": "storage", "instance": "storage-1"}},
        {"targets": ["127.0.0.1:9102"], "labels": {"job": "storage", "instance": "storage-2"}},
    ]
