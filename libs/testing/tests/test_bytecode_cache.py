"""The processes tests start cache compiled bytecode outside the checkout where the
environment forbids bytecode files (`tamto_testing.plugin.cache_child_bytecode`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tamto_testing.plugin import cache_child_bytecode


def test_a_forbidden_bytecode_cache_moves_to_a_prefix_outside_the_checkout(
    tmp_path: Path,
) -> None:
    environ = {"PYTHONDONTWRITEBYTECODE": "1", "OTHER": "kept"}
    prefix = cache_child_bytecode(environ)
    assert prefix is not None
    assert prefix.is_dir()
    assert environ == {"PYTHONPYCACHEPREFIX": str(prefix), "OTHER": "kept"}
    # A child started with it compiles a module once, into the prefix, not beside it.
    (tmp_path / "probe_module.py").write_text("VALUE = 1\n")
    child = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-c", "import probe_module"],
        cwd=tmp_path,
        env={**child, **environ},
        check=True,
    )
    cached = prefix / str(tmp_path).lstrip("/")
    assert [p.name.split(".")[0] for p in cached.glob("*.pyc")] == ["probe_module"]
    assert not (tmp_path / "__pycache__").exists()


def test_an_environment_that_allows_bytecode_or_chose_a_prefix_is_left_alone() -> None:
    for environ in ({}, {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/x"}):
        before = dict(environ)
        assert cache_child_bytecode(environ) is None
        assert environ == before


#: Run with PYTHONDONTWRITEBYTECODE=1: switch the cache on into argv[1], import a module.
OWN_CACHE = """
import sys
from pathlib import Path
from tamto_testing.plugin import cache_own_bytecode
cache_own_bytecode(Path(sys.argv[1]))
import probe_module
"""


def test_the_test_process_itself_caches_what_it_imports_after_configure(tmp_path: Path) -> None:
    """The pytest process started with PYTHONDONTWRITEBYTECODE: its test modules (and what
    they import) are cached under the prefix from `pytest_configure` on."""
    prefix, source = tmp_path / "prefix", tmp_path / "source"
    source.mkdir()
    (source / "probe_module.py").write_text("VALUE = 1\n")
    subprocess.run(
        [sys.executable, "-c", OWN_CACHE, str(prefix)],
        cwd=source,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=True,
    )
    cached = prefix / str(source).lstrip("/")
    assert [p.name.split(".")[0] for p in cached.glob("*.pyc")] == ["probe_module"]
    assert not (source / "__pycache__").exists()
