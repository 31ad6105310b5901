"""Configuration built once at the process edge, frozen and validated.

A service declares a frozen dataclass whose fields are made with `setting()`.
`load_config` fills it from, in order of precedence: command-line flags
(`--lease-ttl-s 5`), the service's environment (`TAMTO_ROUTER_LEASE_TTL_S`), the
shared environment (`TAMTO_LEASE_TTL_S`), then the default. Every value is
parsed by its annotated type and checked; the first bad one raises
`ConfigError` naming the setting, which the process edge prints as one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import socket
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tamto_common.errors import ConfigError
from tamto_common.tls import TlsMaterial

T = TypeVar("T")

#: The exporters `--trace-exporter` takes (`otlp` is OTLP over gRPC;
#: `tamto_common.telemetry` makes them).
EXPORTERS = ("none", "console", "otlp", "otlp-grpc", "otlp-http")


@dataclasses.dataclass(frozen=True)
class TraceSettings:
    """Where and how a process exports its spans (`tamto_common.telemetry`)."""

    exporter: str = "none"
    endpoint: str = "http://127.0.0.1:4317"
    ca_file: str = ""
    sample_ratio: float = 1.0


Check = Callable[[Any], str | None]


def setting(default: Any, help: str, check: Check | None = None) -> Any:
    """Declare a config field: its default, its help text, and an optional check.

    `check` returns None when the (parsed) value is fine, or the problem.
    """
    return dataclasses.field(default=default, metadata={"help": help, "check": check})


#: Bytes in a mebibyte, for settings given in MiB.
MIB = 1024 * 1024


def port_check(value: int) -> str | None:
    return None if 0 <= value <= 65535 else f"must be a port number 0-65535, got {value}"


def positive(value: float) -> str | None:
    return None if value > 0 else f"must be positive, got {value}"


def not_negative(value: float) -> str | None:
    return None if value >= 0 else f"must not be negative, got {value}"


def one_of(*choices: str) -> Check:
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"

    return check


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    """Settings every Tamto service has."""

    host: str = setting("127.0.0.1", "address the gRPC server binds")
    port: int = setting(0, "gRPC port (0: any free port, registered in etcd)", port_check)
    advertise_host: str = setting("", "host other processes dial (default: --host)")
    metrics_port: int = setting(0, "Prometheus metrics port (0: any free port)", port_check)
    etcd_endpoints: str = setting(
        "127.0.0.1:2379", "comma-separated etcd host:port list", lambda v: endpoints_check(v)
    )
    discovery: str = setting(
        "",
        "find etcd by DNS instead of --etcd-endpoints: srv:<record>, e.g. "
        "srv:_tamto._tcp.example.org (resolved once at start-up)",
        lambda v: discovery_check(v),
    )
    discovery_resolver: str = setting(
        "",
        "host:port of the DNS server --discovery asks (default: the system's resolv.conf)",
        lambda v: resolver_check(v),
    )
    cluster_secret: str = setting(
        "",
        "the cluster credential: this node joins only if it matches the one the cluster "
        "recorded in etcd (the first node with one records it; empty: an open cluster)",
    )
    nats_url: str = setting("nats://127.0.0.1:4222", "internal bus URL")
    instance_id: str = setting("", "member id in etcd (default: host-pid-random)")
    lease_ttl_s: int = setting(5, "membership lease TTL in seconds", positive)
    log_level: str = setting("info", "log level", one_of("debug", "info", "warning", "error"))
    trace_exporter: str = setting(
        "none",
        "trace exporter: none, console, otlp-grpc (otlp), otlp-http",
        one_of(*EXPORTERS),
    )
    otlp_endpoint: str = setting(
        "http://127.0.0.1:4317",
        "OTLP collector endpoint: http:// plaintext, https:// TLS (otlp-http: the full "
        "URL, e.g. http://collector:4318/v1/traces)",
    )
    otlp_ca_file: str = setting(
        "", "PEM CA the collector's certificate must chain to (https://; default: system roots)"
    )
    trace_sample_ratio: float = setting(
        1.0,
        "share of the traces starting here that are sampled (0-1); spans continuing a "
        "message's or a call's trace follow its decision",
        lambda v: None if 0 <= v <= 1 else f"must be between 0 and 1, got {v}",
    )
    shutdown_grace_s: float = setting(5.0, "seconds to drain in-flight calls on SIGTERM", positive)
    tls_cert_file: str = setting("", "PEM certificate chain: serve TLS only, dial peers with it")
    tls_key_file: str = setting("", "PEM private key of --tls-cert-file")
    tls_ca_file: str = setting("", "PEM CA that peers' certificates must chain to")
    tls_client_auth: str = setting(
        "require",
        "client certificates on TLS: require (mTLS) or optional",
        one_of("require", "optional"),
    )

    @property
    def trace_settings(self) -> TraceSettings:
        return TraceSettings(
            self.trace_exporter, self.otlp_endpoint, self.otlp_ca_file, self.trace_sample_ratio
        )

    @property
    def dial_host(self) -> str:
        return self.advertise_host or self.host

    def client_address_for(self, address: str) -> str:
        """The address this instance advertises to clients in its membership record,
        given the one peers dial (`address`); empty: clients do not call it directly."""
        return ""

    @property
    def member_id(self) -> str:
        return self.instance_id or _default_instance_id()

    def etcd_hosts(self) -> list[tuple[str, int]]:
        return parse_endpoints(self.etcd_endpoints)

    def tls(self) -> TlsMaterial | None:
        """The TLS material to serve and dial with, or None for plaintext.

        Raises `ConfigError` when only some of the three files are set or one is unreadable.
        """
        files = (self.tls_cert_file, self.tls_key_file, self.tls_ca_file)
        if not any(files):
            return None
        if not all(files):
            raise ConfigError(
                "--tls-cert-file / --tls-key-file / --tls-ca-file",
                "set all three to serve TLS, or none for plaintext",
            )
        return TlsMaterial.load(
            Path(self.tls_cert_file).expanduser(),
            Path(self.tls_key_file).expanduser(),
            Path(self.tls_ca_file).expanduser(),
            require_client_cert=self.tls_client_auth == "require",
        )


_INSTANCE_ID = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def _default_instance_id() -> str:
    return _INSTANCE_ID


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """Parse `host:port,host:port`; raises ValueError naming the bad entry."""
    out = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port, got {part.strip()!r}")
        out.append((host, int(port)))
    return out


def endpoints_check(text: str) -> str | None:
    try:
        parse_endpoints(text)
    except ValueError as exc:
        return str(exc)
    return None


#: The prefix of a `--discovery` setting naming a DNS SRV record (`tamto_common.discovery`).
SRV_PREFIX = "srv:"


def srv_name(discovery: str) -> str:
    """The record name of a `srv:<name>` discovery setting; ValueError if it is not one."""
    name = discovery[len(SRV_PREFIX) :] if discovery.startswith(SRV_PREFIX) else ""
    if not name.strip("."):
        raise ValueError(
            f"expected srv:<record name>, e.g. srv:_tamto._tcp.example.org, got {discovery!r}"
        )
    return name


def discovery_check(text: str) -> str | None:
    """The check of `--discovery`: empty (static endpoints) or `srv:<name>`."""
    if not text:
        return None
    try:
        srv_name(text)
    except ValueError as exc:
        return str(exc)
    return None


def resolver_check(text: str) -> str | None:
    """The check of `--discovery-resolver`: empty (the system's resolver) or one host:port."""
    if not text:
        return None
    try:
        endpoints = parse_endpoints(text)
    except ValueError as exc:
        return str(exc)
    return None if len(endpoints) == 1 else f"expected one host:port, got {text!r}"


def _parse(kind: Any, raw: str) -> Any:
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected true or false, got {raw!r}")
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
    if kind is Path:
        return Path(raw).expanduser()
    return raw


def load_config(
    cls: type[T],
    service: str,
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """Build `cls` from flags, environment and defaults; raise ConfigError on a bad value."""
    env = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    parser = argparse.ArgumentParser(prog=f"tamto-{service}", exit_on_error=False)
    for f in fields:
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, help=f.metadata["help"])
    try:
        flags = vars(parser.parse_args(list(argv or [])))
    except argparse.ArgumentError as exc:
        raise ConfigError("(command line)", str(exc)) from None

    values: dict[str, Any] = {}
    for f in fields:
        flag = f"--{f.name.replace('_', '-')}"
        own_env = f"TAMTO_{service.upper()}_{f.name.upper()}"
        shared_env = f"TAMTO_{f.name.upper()}"
        for source, raw in (
            (flag, flags.get(f.name)),
            (own_env, env.get(own_env)),
            (shared_env, env.get(shared_env)),
        ):
            if raw is None:
                continue
            try:
                values[f.name] = _parse(hints[f.name], raw)
            except ValueError as exc:
                raise ConfigError(source, str(exc)) from None
            break
        value = values.get(f.name, f.default)
        check = f.metadata.get("check")
        problem = check(value) if check else None
        if problem:
            raise ConfigError(f"{flag} / {own_env}", problem)
    return cls(**values)
