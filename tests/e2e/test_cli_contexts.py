"""`tamto context`: named connection profiles in a user config file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tamto_testing.cluster import TestCluster

from ..programs import run_to_end

pytestmark = pytest.mark.e2e


def tamto(config: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI with only the config file to go by (no TAMTO_URL, TAMTO_API_KEY)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TAMTO_")}
    return run_to_end(
        [sys.executable, "-m", "tamto_cli", *args],
        env={"TAMTO_CONFIG": str(config), **env},
        base_env=base,
        cwd=config.parent,
    )


def test_a_selected_context_connects_and_keys_stay_private(
    tamto_cluster: TestCluster, tmp_path: Path
) -> None:
    config = tmp_path / "contexts.json"
    added = tamto(config, "context", "add", "local", "--url", tamto_cluster.url,
                  "--api-key", tamto_cluster.credential)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert (
        tamto(config, "context", "add", "nowhere", "--url", "tamto://127.0.0.1:1").returncode == 0
    )
    assert stat.S_IMODE(config.stat().st_mode) == 0o600

    listed = tamto(config, "context", "list", "--json")
    assert json.loads(listed.stdout) == [
        {"name": "local", "selected": True, "url": tamto_cluster.url, "api_key": True,
         "ca_file": None},
        {"name": "nowhere", "selected": False, "url": "tamto://127.0.0.1:1", "api_key": False,
         "ca_file": None},
    ]  # fmt: skip
    assert tamto_cluster.credential not in listed.stdout

    stream = f"ctx-{uuid.uuid4().hex[:8]}"
    made = tamto(config, "stream", "ensure", stream)
    assert made.returncode == 0, made.stderr
    assert stream in tamto(config, "stream", "list").stdout
    # A flag or the environment wins over the context: this URL has nobody listening
    # (given up after 1 s, not the default 30 s of retrying).
    elsewhere = tamto(
        config, "stream", "list", TAMTO_URL="tamto://127.0.0.1:1", TAMTO_RETRY_DEADLINE_S="1"
    )
    assert elsewhere.returncode == 11  # UNAVAILABLE

    assert tamto(config, "context", "use", "nowhere").returncode == 0
    # now it goes nowhere
    assert tamto(config, "stream", "list", TAMTO_RETRY_DEADLINE_S="1").returncode == 1
    # TAMTO_CONTEXT picks one for a single command.
    assert tamto(config, "stream", "list", TAMTO_CONTEXT="local").returncode == 0


def test_bad_context_input_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "contexts.json"
    missing = tamto(config, "context", "use", "ghost")
    assert (missing.returncode, "'ghost'" in missing.stderr) == (2, True)
    bad_url = tamto(config, "context", "add", "x", "--url", "http://a:1")
    assert bad_url.returncode == 2
    assert "--url" in bad_url.stderr
    unknown = tamto(config, "stream", "list", TAMTO_CONTEXT="ghost")
    assert unknown.returncode == 1
    assert "no context named 'ghost'" in unknown.stderr
    impatient = tamto(config, "stream", "list", TAMTO_RETRY_DEADLINE_S="soon")
    assert impatient.returncode == 2
    assert "TAMTO_RETRY_DEADLINE_S must be seconds, 0 or more, got 'soon'" in impatient.stderr
