"""No service's package or tests import another service.

Services talk only through `proto/` over gRPC, so each can be built, deployed and
upgraded on its own. A test that needs two services is an end-to-end test and
lives in `tests/e2e`. Every import counts here, `if TYPE_CHECKING:` ones included:
a type-only import still ties one service's code to another's.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def service_packages() -> dict[str, Path]:
    """Each service's top-level package name and its directory (sources and tests)."""
    return {f"tamto_{d.name}": d for d in sorted((ROOT / "services").iterdir()) if d.is_dir()}


def imported_packages(path: Path) -> set[str]:
    """The top-level packages that `path` imports anywhere (absolute imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def crossings(services: dict[str, Path]) -> list[str]:
    """`file imports package` for every file of a service importing another service."""
    found: list[str] = []
    for own, directory in services.items():
        others = set(services) - {own}
        for path in sorted(directory.rglob("*.py")):
            if ".venv" in path.parts:
                continue
            for package in sorted(imported_packages(path) & others):
                found.append(f"{path.relative_to(directory.parent)} imports {package}")
    return found


def test_the_check_finds_a_crossing(tmp_path: Path) -> None:
    (tmp_path / "alpha" / "tests").mkdir(parents=True)
    (tmp_path / "beta").mkdir()
    (tmp_path / "alpha" / "tests" / "test_x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tamto_beta.store\n"
    )
    (tmp_path / "beta" / "ok.py").write_text("import tamto_common\nfrom . import ok\n")
    services = {"tamto_alpha": tmp_path / "alpha", "tamto_beta": tmp_path / "beta"}
    assert [c.split(" imports ")[1] for c in crossings(services)] == ["tamto_beta"]


def test_no_service_imports_another() -> None:
    services = service_packages()
    assert {"tamto_gateway", "tamto_router", "tamto_storage", "tamto_auth"} <= set(services)
    assert crossings(services) == []
