"""A persistent session's record in etcd: its QoS 2 packet ids (and their messages'
ids) round-trip, and a record written before they were kept still reads."""

from __future__ import annotations

import json

from tamto_gateway.mqtt.state import StoredSession


def test_a_session_keeps_its_qos2_packet_ids() -> None:
    received = {4: "mqtt-a", 9: "mqtt-b"}
    session = StoredSession("alice", {"TopicA/#": 2}, received=received, releasing=[1])
    assert StoredSession.decode(session.encode()) == session


def test_a_record_without_qos2_packet_ids_reads_as_having_none() -> None:
    raw = json.dumps({"subject": "alice", "subscriptions": {"a/+": 1}}).encode()
    assert StoredSession.decode(raw) == StoredSession("alice", {"a/+": 1})
