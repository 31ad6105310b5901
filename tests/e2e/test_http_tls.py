"""The HTTP API on a TLS system: served with the gateway's certificate, and a plaintext
client on the TLS port gets a plain 400 problem at once (httpx and curl)."""

from __future__ import annotations

import json
import ssl
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tls_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    workdir = tmp_path_factory.mktemp("http-tls")
    with TestCluster(workdir, tamto_infra, tls=True).running() as cluster:
        yield cluster


async def test_https_with_the_cluster_ca(tls_cluster: TestCluster) -> None:
    url = tls_cluster.http_url()
    assert url.startswith("https://")
    verify = ssl.create_default_context(cafile=str(tls_cluster.ca_file))
    headers = {"X-Api-Key": tls_cluster.credential}
    async with httpx.AsyncClient(base_url=url, verify=verify, headers=headers) as client:
        response = await client.get("/v1/whoami")
        assert response.status_code == 200, response.text
        assert response.json()["subject"]


async def test_plaintext_on_the_tls_port_is_refused_at_once(tls_cluster: TestCluster) -> None:
    plain = tls_cluster.http_url().replace("https://", "http://")
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"{plain}/v1/whoami")
    assert time.monotonic() - started < 2
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "PLAINTEXT_ON_TLS_PORT"
    assert "https://" in response.json()["detail"]


def test_curl_over_tls_and_over_plaintext(tls_cluster: TestCluster) -> None:
    url = tls_cluster.http_url()
    secure = subprocess.run(
        [
            "curl",
            "-sS",
            "--fail-with-body",
            "--cacert",
            str(tls_cluster.ca_file),
            "-H",
            f"X-Api-Key: {tls_cluster.credential}",
            f"{url}/v1/whoami",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(secure.stdout)["subject"]
    plain = subprocess.run(
        [
            "curl",
            "-sS",
            "-m",
            "5",
            "-w",
            "\\n%{http_code}",
            url.replace("https://", "http://") + "/v1/whoami",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    body, status = plain.stdout.rsplit("\n", 1)
    assert status == "400"
    assert json.loads(body)["code"] == "PLAINTEXT_ON_TLS_PORT"
