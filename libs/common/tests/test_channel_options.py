"""Servers accept the keep-alive pings that Tamto's own channels send."""

from __future__ import annotations

from tamto_common.channels import CHANNEL_OPTIONS, SERVER_OPTIONS


def test_servers_accept_the_pings_every_channel_sends() -> None:
    client = dict(CHANNEL_OPTIONS)
    server = dict(SERVER_OPTIONS)
    # A ping every keepalive_time_ms must never count as too early on the server,
    # or the server answers GOAWAY "too many pings" on an idle stream.
    assert (
        server["grpc.http2.min_recv_ping_interval_without_data_ms"]
        < client["grpc.keepalive_time_ms"]
    )
    assert server["grpc.http2.max_ping_strikes"] == 0
    assert server["grpc.keepalive_permit_without_calls"] == 1
    # The server takes the messages its peers send.
    for size in ("grpc.max_send_message_length", "grpc.max_receive_message_length"):
        assert server[size] == client[size]
