"""The development credential a local system (`tamto up`) keeps in its data directory.

It lives here, not in the launcher (`tamto_local`), because clients read it too: the
CLI's client commands find their API key in it without the server packages installed.
The launcher makes the file (`tamto_local.layout.dev_credential`); this reads it.
"""

from __future__ import annotations

from pathlib import Path

from tamto_common.apikeys import parse_api_key
from tamto_common.durable import DamagedFile, read_whole
from tamto_common.errors import Unauthenticated

DEV_CREDENTIAL_FILE = "dev-credential"


class CredentialFileError(Exception):
    """The development credential file is empty or damaged; the message names it, in one line."""


def load_dev_credential(data_dir: Path) -> str | None:
    """The development API key of this data directory; None if it has none yet.

    Raises CredentialFileError, naming the file, when it is empty or holds no API key
    (never hands out a blank key).
    """
    path = data_dir / DEV_CREDENTIAL_FILE
    try:
        text = read_whole(path, "the development credential").decode().strip()
        parse_api_key(text)
    except FileNotFoundError:
        return None
    except DamagedFile as exc:
        raise CredentialFileError(f"{exc}: delete it and start again to make a new one") from None
    except (UnicodeDecodeError, Unauthenticated):
        raise CredentialFileError(
            f"the development credential {path} does not hold an API key (damaged?): "
            "delete it and start again to make a new one"
        ) from None
    return text
