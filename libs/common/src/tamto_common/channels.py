"""gRPC channels to peers, one per address, closed by their owner."""

from __future__ import annotations

import grpc

from tamto_common.telemetry import client_interceptors
from tamto_protocol.keepalive import KEEPALIVE_OPTIONS
from tamto_protocol.reconnect import RECONNECT_OPTIONS

#: Batches can be large; every Tamto hop allows this much per message.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_MESSAGE_SIZES = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]

CHANNEL_OPTIONS = [
    *_MESSAGE_SIZES,
    # A peer that stops answering (a network cut) is noticed within about 2 s.
    *KEEPALIVE_OPTIONS,
    # A peer serving again is dialled within 0.3 s (gRPC's default waits up to 120 s).
    *RECONNECT_OPTIONS,
]

#: What every service's gRPC server runs with: the message sizes, keep-alive pings of
#: its own to its clients, and leave for the peers' pings. gRPC servers by default accept
#: a ping without data at most every 5 minutes and answer a third early one with GOAWAY
#: "too many pings": an idle append stream between router and storage, pinged by the
#: router, was torn down that way after a few minutes, failing a publish with
#: UNAVAILABLE (found by the long fuzz run). Clients ping every second
#: (`tamto_protocol.keepalive`); a server pings its clients less often, as it may
#: have thousands.
#:
#: And room for a burst of new calls: gRPC's Python server takes the calls gRPC
#: core accepted one by one from its event loop, and core resets those that wait
#: beyond a backlog (by default some past 1,000 waiting, all past 3,000), the
#: client seeing CANCELLED "CANCELLED" (or INTERNAL "Internal error from Core" on
#: a write). A crowd of 10,000 consumers attaching had 0-7,259 streams reset so
#: per run, each retried, which is more work for the loop, not less; here they
#: wait their turn (gRPC still cancels a call left waiting 30 s). Measured in
#: the crowd test (`tests/e2e/test_crowd.py`); `libs/common/tests/test_server_backlog.py`.
SERVER_OPTIONS = [
    *_MESSAGE_SIZES,
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    # gRPC core times the keep-alive ping by this too (default 60 s): without it a
    # router held a vanished consumer's session, and its unacked messages, for over a
    # minute (`libs/common/tests/test_server_keepalive.py`).
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 500),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.server.max_pending_requests", 100_000),
    ("grpc.server.max_pending_requests_hard_limit", 200_000),
]


_process_credentials: grpc.ChannelCredentials | None = None


def use_tls_for_peers(credentials: grpc.ChannelCredentials | None) -> None:
    """Make every `ChannelPool` of this process dial peers with `credentials` (None: plaintext).

    The service runner calls it once, at start, from the service's TLS settings,
    so every service's channels to its peers use mTLS without each one wiring it.
    """
    global _process_credentials
    _process_credentials = credentials


def peer_channel(address: str, own_connection: bool = False) -> grpc.aio.Channel:
    """A new channel to a peer service, with this process's TLS settings.

    Channels to one address share one connection unless `own_connection`: then
    this channel's calls travel on a connection of their own.
    """
    options = [*CHANNEL_OPTIONS, *_OWN_CONNECTION] if own_connection else CHANNEL_OPTIONS
    if _process_credentials is not None:
        return grpc.aio.secure_channel(
            address,
            _process_credentials,
            options=options,
            interceptors=client_interceptors(),
        )
    return grpc.aio.insecure_channel(address, options=options, interceptors=client_interceptors())


#: gRPC shares a connection among the channels with the same target and options
#: (its global subchannel pool); a channel with a pool of its own does not.
_OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


class ChannelPool:
    """Caches one `grpc.aio.Channel` per address; `close()` closes them all.

    Channels use TLS (presenting this service's certificate) when the process
    was started with TLS settings; see `use_tls_for_peers`.
    """

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def get(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = peer_channel(address)
            self._channels[address] = channel
        return channel

    async def discard(self, address: str) -> None:
        """Drop a channel to a peer that went away."""
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
