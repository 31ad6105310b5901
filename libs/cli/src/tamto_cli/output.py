"""How the CLI shows messages and reads message options, for people and for scripts.

`tamto pub`, `tamto sub` and `tamto stream get` share these: one
parser for ``--header k=v``, one rendering of a payload in each ``--format``
(raw text, pretty-printed JSON, hex), and one JSON shape per message for
``--json`` (one object a line, so a script can read the output as a stream).
"""

from __future__ import annotations

import enum
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tamto_sdk


class PayloadFormat(enum.StrEnum):
    """How a payload is printed: as text (``raw``), pretty JSON, or hex."""

    RAW = "raw"
    JSON = "json"
    HEX = "hex"


def parse_headers(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; ValueError naming the bad pair (no ``=``, empty key)."""
    headers: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"a header is KEY=VALUE with a non-empty key, got {pair!r}")
        headers[name] = value
    return headers


def render_payload(payload: bytes, form: PayloadFormat) -> str:
    """`payload` as text in `form`. JSON that does not parse is shown raw (the
    message is what it is; the caller asked for pretty-printing, not validation)."""
    if form is PayloadFormat.HEX:
        return payload.hex()
    text = payload.decode(errors="replace")
    if form is PayloadFormat.JSON:
        try:
            return json.dumps(json.loads(payload), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def message_json(message: tamto_sdk.Message, form: PayloadFormat) -> str:
    """One message as one JSON line. The payload is text (``raw``), the parsed
    JSON value (``json``; text when it does not parse) or hex (``hex``)."""
    payload: Any
    if form is PayloadFormat.JSON:
        try:
            payload = json.loads(message.payload)
        except ValueError:
            payload = message.payload.decode(errors="replace")
    else:
        payload = render_payload(message.payload, form)
    fields = {
        "stream": message.stream,
        "partition": message.partition,
        "offset": message.offset,
        "key": message.key.decode(errors="replace") if message.key is not None else None,
        "headers": dict(message.headers),
        "id": message.id,
        "publish_time": message.publish_time.isoformat(),
        "delivery_count": message.delivery_count,
        "payload": payload,
    }
    return json.dumps(fields, ensure_ascii=False)


def message_line(message: tamto_sdk.Message, form: PayloadFormat, as_json: bool) -> str:
    """How `tamto sub` and `tamto stream get` print one message: `message_json`, or
    ``STREAM/PARTITION@OFFSET<TAB>KEY<TAB>PAYLOAD``."""
    if as_json:
        return message_json(message, form)
    key = message.key.decode(errors="replace") if message.key else ""
    where = f"{message.stream}/{message.partition}@{message.offset}"
    return f"{where}\t{key}\t{render_payload(message.payload, form)}"


def report(as_json: bool, text: str, fields: dict[str, Any]) -> None:
    """A command's result: `text` for people, or with ``--json`` `fields` as one JSON
    object (every command takes ``--json``, those that only act too)."""
    print(json.dumps(fields) if as_json else text, flush=True)
