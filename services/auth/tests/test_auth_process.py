"""`python -m tamto_auth` as a real process: serves the dev key, stops cleanly, logs no secret."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import grpc
import pytest

from tamto_common.apikeys import new_api_key
from tamto_local.ports import free_port
from tamto_protocol.v1 import auth_pb2, auth_pb2_grpc
from tamto_testing.processes import TestProcess, tcp_open


def test_auth_process_serves_the_dev_key(tmp_path: Path, etcd_endpoint: str, nats_url: str) -> None:
    dev_key = new_api_key()
    port = free_port()
    env = {
        **os.environ,
        "TAMTO_AUTH_DEV_API_KEY": str(dev_key),
        "TAMTO_ETCD_ENDPOINTS": etcd_endpoint,
        "TAMTO_NATS_URL": nats_url,
    }
    argv = [
        sys.executable,
        "-m",
        "tamto_auth",
        "--port",
        str(port),
        "--data-dir",
        str(tmp_path / "data"),
        "--log-level",
        "debug",
    ]
    proc = TestProcess("auth", argv, tmp_path / "auth.log", env).start()
    try:
        proc.wait_ready(lambda: tcp_open("127.0.0.1", port))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = auth_pb2_grpc.AuthStub(channel)
            response = stub.Authenticate(auth_pb2.AuthRequest(api_key=str(dev_key)), timeout=10)
            assert response.subject == "dev"
            with pytest.raises(grpc.RpcError) as info:
                stub.Authenticate(auth_pb2.AuthRequest(api_key=str(new_api_key())), timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert len(list((tmp_path / "data" / "auth" / "signing-keys").glob("*.pem"))) == 1
    finally:
        code = proc.stop()
    assert code == 0, proc.log_tail()
    log = (tmp_path / "auth.log").read_text()
    assert dev_key.key_id in log  # the log did record the key being stored and used...
    assert dev_key.secret not in log  # ...but never its secret
