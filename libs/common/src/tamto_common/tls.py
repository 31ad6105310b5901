"""TLS for every listener and every service-to-service channel.

A service with `--tls-cert-file`, `--tls-key-file` and `--tls-ca-file` serves
TLS only, and dials its peers with TLS presenting the same certificate: that is
mTLS between services. `--tls-client-auth require` (the default) refuses a
client without a certificate signed by the CA; the gateway defaults to
`optional`, since its clients are applications holding API keys, not
certificates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from tamto_common.errors import ConfigError


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """PEM bytes of a certificate chain, its key and the CA that peers must chain to."""

    cert_chain: bytes
    private_key: bytes
    ca: bytes
    require_client_cert: bool = True

    @classmethod
    def load(cls, cert: Path, key: Path, ca: Path, require_client_cert: bool) -> TlsMaterial:
        """Read the three files; `ConfigError` naming the setting of one that cannot be read."""
        parts: list[bytes] = []
        for setting, path in (
            ("--tls-cert-file", cert),
            ("--tls-key-file", key),
            ("--tls-ca-file", ca),
        ):
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise ConfigError(setting, f"cannot read {path}: {exc.strerror}") from None
            if b"-----BEGIN" not in data:
                raise ConfigError(setting, f"{path} is not PEM")
            parts.append(data)
        return cls(parts[0], parts[1], parts[2], require_client_cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for a listener: TLS, verifying client certificates against the CA."""
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.ca,
            require_client_auth=self.require_client_cert,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials for dialing a peer: verify it against the CA, present our certificate."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca,
            private_key=self.private_key,
            certificate_chain=self.cert_chain,
        )
