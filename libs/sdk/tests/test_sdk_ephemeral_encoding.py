"""The ephemeral SDK's Arrow encoding (`tamto_sdk.ephemeral.encode_messages`).

A publish or request of plain payloads must not make pyarrow import pandas:
its first conversion of Python objects does (seconds on a loaded machine),
which stalled the first request of every process in the ephemeral benchmark.
"""

from __future__ import annotations

import subprocess
import sys

from tamto_protocol.batch import decode_batch
from tamto_sdk.ephemeral import encode_messages


def test_plain_payloads_are_encoded_without_importing_pandas() -> None:
    script = (
        "import sys\n"
        "from tamto_sdk.ephemeral import encode_messages\n"
        "encode_messages([b'a', bytearray(b'bc')], [None, None], [None, {}])\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False", done.stderr


def test_encoded_columns_round_trip() -> None:
    plain = decode_batch(encode_messages([b"a", b"bc", b""]).arrow_ipc)
    assert plain.column("payload").to_pylist() == [b"a", b"bc", b""]
    assert plain.column("key").null_count == 3
    assert plain.column("headers").null_count == 3
    given = decode_batch(encode_messages([b"x", b"y"], [b"k", None], [{"h": "v"}, None]).arrow_ipc)
    assert given.column("key").to_pylist() == [b"k", None]
    assert given.column("headers").to_pylist() == [[("h", "v")], None]
