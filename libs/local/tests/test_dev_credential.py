"""The launcher's development credential: made once, atomically; an empty or damaged one is
refused with its path, never handed out as a blank API key (after a power cut
`tamto up` printed an empty key)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tamto_cli.settings import api_key
from tamto_common.apikeys import parse_api_key
from tamto_common.dev_credential import load_dev_credential
from tamto_common.durable import DamagedFile
from tamto_local.layout import LaunchError, dev_credential
from tamto_local.tls import ensure_dev_pki
from tamto_testing.needs import needs
from tamto_testing.power_loss import PowerLossDisk, unavailable_reason


def test_made_once_private_and_read_back(tmp_path: Path) -> None:
    key = dev_credential(tmp_path / "data")
    parse_api_key(key)
    path = tmp_path / "data" / "dev-credential"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert dev_credential(tmp_path / "data") == key
    assert load_dev_credential(tmp_path / "data") == key
    assert load_dev_credential(tmp_path / "elsewhere") is None


@pytest.mark.parametrize("content", [b"", b"\n", b"\x00\x00\x00\x00", b"tamto_short\n"])
def test_an_empty_or_damaged_credential_is_refused_with_its_path(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "dev-credential"
    path.write_bytes(content)
    with pytest.raises(LaunchError, match=f"{path}.*delete it"):
        dev_credential(tmp_path)
    assert path.read_bytes() == content  # left for the user to look at
    with pytest.raises(SystemExit, match="development credential"):
        api_key(None, tmp_path)


def test_an_empty_development_tls_file_is_named_not_used(tmp_path: Path) -> None:
    ensure_dev_pki(tmp_path / "tls", names=("gateway",))
    (tmp_path / "tls" / "gateway-key.pem").write_bytes(b"")
    with pytest.raises(DamagedFile, match=r"gateway-key.pem is empty"):
        ensure_dev_pki(tmp_path / "tls", names=("gateway",))


@needs(unavailable_reason())
def test_the_credential_survives_a_power_cut_right_after_it_was_made(tmp_path: Path) -> None:
    # What a torn write looks like: after a cut the file is empty and `tamto up` prints an
    # empty key.
    disk = PowerLossDisk(tmp_path / "backing", tmp_path / "data")
    with disk:
        key = dev_credential(disk.mountpoint)
        disk.cut()
        disk.mount()
        assert load_dev_credential(disk.mountpoint) == key
