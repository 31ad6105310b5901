"""HTTP workloads, run inside a worker process: publishing batches to a gateway's
HTTP/JSON API (docs/http.md) with httpx, beside the SDK's `send_batch` phase.

Each publisher keeps `HTTP_IN_FLIGHT` requests in flight, each a batch of
`BATCH_MESSAGES` messages, in one of two bodies: NDJSON (one `{"text": ...}` object
per message) or Arrow IPC (the batch as the SDK would encode it). A batch counts
when its answer (all of it durable) arrives.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
import time

import httpx

from tamto_bench.ceiling import BATCH_MESSAGES, arrow_batch
from tamto_bench.gate import Gate
from tamto_bench.spec import JobResult, JobSpec
from tamto_bench.timing import in_window, wait_for_start

#: Requests one publisher has in flight at once.
HTTP_IN_FLIGHT = 4
NDJSON = "application/x-ndjson"
ARROW = "application/vnd.apache.arrow.stream"


def ndjson_body(size: int, messages: int = BATCH_MESSAGES) -> bytes:
    """`messages` lines, each a message whose payload is `size` ASCII letters."""
    text = "".join(random.choices(string.ascii_letters, k=size))
    line = json.dumps({"text": text}, separators=(",", ":"))
    return ("\n".join([line] * messages) + "\n").encode()


def body_of(spec: JobSpec) -> tuple[bytes, str]:
    """The request body a publisher sends over and over, and its content type."""
    if spec.body == "arrow":
        return arrow_batch(spec.size), ARROW
    if spec.body == "ndjson":
        return ndjson_body(spec.size), NDJSON
    raise ValueError(f"unknown HTTP body {spec.body!r}")


async def http_publish(spec: JobSpec, gate: Gate) -> JobResult:
    """Publish batches over HTTP as fast as `HTTP_IN_FLIGHT` requests allow."""
    result = JobResult()
    body, content_type = body_of(spec)
    headers = {"X-Api-Key": spec.api_key, "Content-Type": content_type}
    url = f"{spec.target}/v1/streams/{spec.stream}/messages"
    limits = httpx.Limits(max_connections=HTTP_IN_FLIGHT)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=60) as client:
        await client.get(f"{spec.target}/openapi.json")  # the connection, before the window
        start = await wait_for_start(await gate.ready())
        end = start + spec.duration_s
        result.started = time.time()

        async def loop() -> None:
            while time.monotonic() < end:
                response = await client.post(url, content=body)
                if response.status_code != 200:
                    result.errors += BATCH_MESSAGES
                    continue
                result.total += BATCH_MESSAGES
                result.last = time.time()
                if in_window(start, end):
                    result.in_window += BATCH_MESSAGES

        await asyncio.gather(*(loop() for _ in range(HTTP_IN_FLIGHT)))
    return result


JOBS = {"pub": http_publish}
