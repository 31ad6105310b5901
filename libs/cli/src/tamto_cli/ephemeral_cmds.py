"""The CLI's ephemeral-stream commands: `tamto pub --topic`, `tamto sub --match --group`,
`tamto request` (docs/ephemeral.md).

`pub` and `sub` in `main` hand over to these when given the ephemeral options;
`request` is registered as its own command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tamto_cli.connect import connect_client
from tamto_cli.connect import run as run_command
from tamto_cli.options import ApiKey, DataDir, Url

if TYPE_CHECKING:
    import tamto_sdk


async def publish(
    client: tamto_sdk.Client, stream: str, payloads: list[str], topic: str, key: bytes | None
) -> None:
    """Publish `payloads` under `topic` (at most once); prints one summary line."""
    async with client.ephemeral_producer(stream) as producer:
        for payload in payloads:
            await producer.publish(payload.encode(), topic=topic, key=key)
    typer.echo(f"{stream}: {len(payloads)} published to topic {topic!r}")


async def subscribe(
    client: tamto_sdk.Client, stream: str, match: str | None, group: str, count: int
) -> None:
    """Print what the subscription receives, `STREAM[TOPIC]<TAB>KEY<TAB>PAYLOAD` a line."""
    seen = 0
    async with client.subscribe(stream, match=match, group=group) as subscription:
        async for message in subscription:
            key = message.key.decode(errors="replace") if message.key else ""
            text = message.payload.decode(errors="replace")
            typer.echo(f"{stream}[{message.topic}]\t{key}\t{text}", nl=True)
            seen += 1
            if count and seen >= count:
                return


def request(
    stream: str,
    payload: Annotated[str, typer.Argument(help="the request's payload")],
    topic: Annotated[str, typer.Option(help="the request's topic")] = "",
    timeout_s: Annotated[
        float | None,
        typer.Option(help="wait this long for the reply (default: the stream's)"),
    ] = None,
    response_stream: Annotated[
        str, typer.Option(help="name the response stream (default: a unique one)")
    ] = "",
    wait_for_responder: Annotated[
        bool, typer.Option(help="with nobody consuming the topic, wait instead of failing")
    ] = False,
    url: Url = None,
    api_key: ApiKey = None,
    data_dir: DataDir = None,
) -> None:
    """Send a request to an ephemeral stream and print its reply; exits 1 on a timeout
    (the server's: DEADLINE_EXCEEDED) and at once when nobody consumes the topic
    (no responders), unless --wait-for-responder."""

    async def run() -> None:
        async with await connect_client(url, api_key, data_dir) as client:
            reply = await client.request(
                stream,
                payload.encode(),
                topic=topic,
                timeout_s=timeout_s,
                response_stream=response_stream,
                wait_for_responder=wait_for_responder,
            )
        typer.echo(reply.payload.decode(errors="replace"))

    run_command(run())
