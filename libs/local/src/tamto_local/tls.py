"""A development certificate authority and certificates, made with `cryptography`.

`tamto up --tls` (and the TLS test fixtures) call `ensure_dev_pki(directory)`,
which writes, once, under `directory`:

    ca.pem, ca-key.pem              the development CA (10 years, EC P-256)
    <name>.pem, <name>-key.pem      one certificate per service and for the
                                    launcher, signed by the CA, valid for
                                    localhost, 127.0.0.1 and ::1 (1 year), usable
                                    as server and client (mTLS between services)

Every file is written atomically (`tamto_common.durable`), private keys with
mode 0600; an empty one (say, left by a crash of an older version) raises
`DamagedFile` naming it. Nothing here is fit for production:
it exists so a laptop can run the whole system with TLS everywhere.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tamto_common.durable import read_whole, write_atomic

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
#: Names the development PKI makes certificates for.
DEV_NAMES = ("auth", "storage", "router", "gateway", "processing", "launcher", "client")
_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class CertPaths:
    """Where one party's certificate, key and the CA it trusts are."""

    cert: Path
    key: Path
    ca: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(certificate chain PEM, private key PEM, CA PEM)."""
        return (
            read_whole(self.cert, "certificate"),
            read_whole(self.key, "private key"),
            read_whole(self.ca, "CA certificate"),
        )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Tamto development"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def make_ca(directory: Path, common_name: str = "Tamto development CA") -> CertPaths:
    """Create a new CA under `directory` (overwriting one that is there)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_atomic(directory / CA_KEY_FILE, _key_pem(key), mode=0o600)
    write_atomic(directory / CA_FILE, cert.public_bytes(serialization.Encoding.PEM))
    return CertPaths(directory / CA_FILE, directory / CA_KEY_FILE, directory / CA_FILE)


def issue(directory: Path, name: str, hosts: Iterable[str] = _HOSTS) -> CertPaths:
    """A certificate for `name` (server and client use) signed by the CA in `directory`."""
    ca_key = serialization.load_pem_private_key(
        read_whole(directory / CA_KEY_FILE, "CA private key"), None
    )
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory / CA_KEY_FILE} is not an EC key")
    ca_cert = x509.load_pem_x509_certificate(read_whole(directory / CA_FILE, "CA certificate"))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = CertPaths(directory / f"{name}.pem", directory / f"{name}-key.pem", directory / CA_FILE)
    write_atomic(paths.key, _key_pem(key), mode=0o600)
    write_atomic(paths.cert, cert.public_bytes(serialization.Encoding.PEM))
    return paths


def cert_paths(directory: Path, name: str) -> CertPaths:
    """Where `ensure_dev_pki` keeps the certificate of `name`."""
    return CertPaths(directory / f"{name}.pem", directory / f"{name}-key.pem", directory / CA_FILE)


def ensure_dev_pki(directory: Path, names: Iterable[str] = DEV_NAMES) -> dict[str, CertPaths]:
    """The development CA and a certificate per name, created where missing."""
    if not _present(directory / CA_FILE, directory / CA_KEY_FILE):
        make_ca(directory)
    out: dict[str, CertPaths] = {}
    for name in names:
        paths = cert_paths(directory, name)
        out[name] = paths if _present(paths.cert, paths.key) else issue(directory, name)
    return out


def _present(*paths: Path) -> bool:
    """Whether every file is there; `DamagedFile` for one that is there but empty."""
    for path in paths:
        if not path.exists():
            return False
        read_whole(path, "development TLS file")
    return True
