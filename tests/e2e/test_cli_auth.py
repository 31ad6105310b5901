"""`tamto auth user|role|bind|token|whoami` against a running system."""

from __future__ import annotations

import json
import uuid

import jwt
import pytest

from tamto_testing.cluster import TestCluster

from .test_cli_pub_sub import tamto

pytestmark = pytest.mark.e2e


def test_user_role_bind_token_whoami(tamto_cluster: TestCluster) -> None:
    u = uuid.uuid4().hex[:6]
    user, role, stream = f"cli-user-{u}", f"cli-role-{u}", f"cli-auth-{u}"
    created = tamto(tamto_cluster, "auth", "user", "create", user, "--json")
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)["api_key"]
    assert json.loads(created.stdout)["identity"] == user

    put = tamto(
        tamto_cluster,
        "auth",
        "role",
        "put",
        role,
        "--grant",
        f"publish:{stream}",
        "-g",
        "consume:*",
    )
    assert put.returncode == 0, put.stderr
    assert put.stdout.strip() == f"{role}: publish:{stream} consume:*"
    bound = tamto(tamto_cluster, "auth", "bind", user, role)
    assert bound.stdout.strip() == f"{role} bound to {user}"

    me = tamto(tamto_cluster, "auth", "whoami", "--json", api_key=key)
    assert me.returncode == 0, me.stderr
    assert json.loads(me.stdout)["subject"] == user
    assert json.loads(me.stdout)["grants"] == [f"publish:{stream}", "consume:*"]

    token = tamto(tamto_cluster, "auth", "token", api_key=key)
    assert jwt.decode(token.stdout.strip(), options={"verify_signature": False})["sub"] == user

    listed = tamto(tamto_cluster, "auth", "user", "list")
    line = next(x for x in listed.stdout.splitlines() if x.startswith(f"{user}\t"))
    assert line.split("\t")[1:4] == ["user", "enabled", role]

    # Not an admin: the CLI prints the denial naming the missing permission, exits 6.
    refused = tamto(tamto_cluster, "auth", "role", "list", api_key=key)
    assert refused.returncode == 6  # PERMISSION_DENIED
    assert refused.stderr.strip() == f"tamto: '{user}' lacks permission admin on '*' (all streams)"

    bad = tamto(tamto_cluster, "auth", "role", "put", role, "--grant", "root:*")
    assert bad.returncode == 2
    assert "--grant" in bad.stderr

    extra = tamto(tamto_cluster, "auth", "user", "add-key", user, "--json")
    assert extra.returncode == 0, extra.stderr
    key_id = json.loads(extra.stdout)["key_id"]
    deleted = tamto(tamto_cluster, "auth", "user", "delete-key", key_id)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == f"key {key_id} of {user}: deleted"
    again = tamto(tamto_cluster, "auth", "user", "delete-key", key_id)
    assert again.returncode == 4  # NOT_FOUND
    assert again.stderr.strip() == f"tamto: auth: no API key with id {key_id}"
    gone = tamto(tamto_cluster, "auth", "whoami", api_key=json.loads(extra.stdout)["api_key"])
    assert gone.returncode == 7  # UNAUTHENTICATED
    assert "invalid API key" in gone.stderr

    unbound = tamto(tamto_cluster, "auth", "bind", user, role, "--remove")
    assert unbound.stdout.strip() == f"{role} unbound from {user}"
    disabled = tamto(tamto_cluster, "auth", "user", "disable", user)
    assert disabled.stdout.strip() == f"{user}: disabled"
    locked_out = tamto(tamto_cluster, "auth", "whoami", api_key=key)
    assert locked_out.returncode == 7
    assert "is disabled" in locked_out.stderr
