"""Gateway settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tamto_common.config import (
    MIB,
    ServiceConfig,
    not_negative,
    one_of,
    port_check,
    positive,
    setting,
)
from tamto_common.errors import InvalidArgument
from tamto_common.names import check_name
from tamto_common.oidc import oidc_issuers_file_setting


def stream_name_check(value: str) -> str | None:
    """None if `value` is empty or a legal stream name, else why not."""
    if not value:
        return None
    try:
        check_name("stream", value)
    except InvalidArgument as exc:
        return str(exc)
    return None


@dataclass(frozen=True, kw_only=True)
class GatewayConfig(ServiceConfig):
    max_message_bytes: int = setting(
        1024 * 1024,
        "largest message accepted (payload, key, headers and id together), in bytes",
        positive,
    )
    max_partitions: int = setting(1024, "most partitions a stream may have", positive)
    max_consumers_per_connection: int = setting(
        1000,
        "most consume streams one client connection may hold open; more are refused with "
        "RESOURCE_EXHAUSTED (0: no limit)",
        not_negative,
    )
    consume_setups: int = setting(
        16,
        "consume streams whose sessions with one router are opened or cancelled at once; "
        "more wait their turn (it matters for routers without ConsumeMux, whose every "
        "session is a call: a crowd attaching or leaving cannot starve publishes)",
        positive,
    )
    consume_setup_slots: int = setting(
        32,
        "client consume streams being set up (authentication, subscribe, authorization, "
        "their router sessions) or torn down at once; more wait their turn: a crowd "
        "attaching or leaving then keeps the event loop's rounds short, and new calls "
        "(publishes) are taken promptly",
        positive,
    )
    token_issuer: str = setting("tamto", "issuer expected in tokens")
    token_audience: str = setting("tamto", "audience expected in tokens")
    upstream_timeout_s: float = setting(30.0, "deadline for calls to routers and auth", positive)
    oidc_issuers_file: str = oidc_issuers_file_setting()
    policy_refresh_s: float = setting(
        30.0, "reload the policy this often even without a bus event (seconds)", positive
    )
    audit_file: str = setting("", "append audit records (JSON lines) here (empty: bus only)")
    # Applications authenticate with API keys or tokens, not certificates.
    tls_client_auth: str = setting(
        "optional",
        "client certificates on TLS: require (mTLS) or optional",
        one_of("require", "optional"),
    )

    http_port: int = setting(
        0,
        "port of the HTTP/JSON API (docs/http.md), TLS with the gRPC port's certificate "
        "when --tls-cert-file is set (0: no HTTP API)",
        port_check,
    )
    http_max_body_bytes: int = setting(
        8 * MIB, "largest HTTP request body accepted, in bytes (more: 413)", positive
    )
    http_consumer_idle_s: float = setting(
        60.0,
        "an HTTP long-poll consumer nobody used this long is closed (seconds)",
        positive,
    )
    http_max_consumers: int = setting(
        10_000,
        "most HTTP consumers (long poll, SSE, WebSocket) open at once on this gateway; "
        "more are refused with RESOURCE_EXHAUSTED",
        positive,
    )
    http_max_wait_s: float = setting(
        30.0, "longest an HTTP long poll may wait for messages (seconds)", positive
    )

    mqtt_port: int = setting(
        0,
        "port of the MQTT 3.1.1 broker (docs/mqtt.md), TLS with the gRPC port's certificate "
        "when --tls-cert-file is set (0: no MQTT)",
        port_check,
    )
    mqtt_stream_levels: int = setting(
        1,
        "the first this many levels of an MQTT topic, joined with '.', name the stream; "
        "the rest is the message's topic within it",
        positive,
    )
    mqtt_stream: str = setting(
        "",
        "one persistent stream every MQTT topic maps to, the whole topic as the message's key, "
        "created at the first MQTT connection if missing (any topic and filter work; "
        "'': the first --mqtt-stream-levels levels name the stream)",
        stream_name_check,
    )
    mqtt_max_inflight: int = setting(
        64,
        "QoS 1 and 2 messages an MQTT connection may have unacknowledged each way; more wait "
        "(that connection alone)",
        positive,
    )
    mqtt_write_buffer_bytes: int = setting(
        1 * MIB,
        "bytes queued for a slow MQTT client past which its deliveries wait",
        positive,
    )

    @property
    def audit_path(self) -> Path | None:
        """Where audit records are appended, or None."""
        return Path(self.audit_file).expanduser() if self.audit_file else None
