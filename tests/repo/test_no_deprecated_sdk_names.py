"""The tree speaks the SDK's current vocabulary (docs/sdk.md, "Names").

The SDK keeps its old names one release, each warning `DeprecationWarning`; the suite
turns warnings into errors, so an old name in a rarely run path would only fail where
it runs. This reads every Python file and doc instead: no module, test, example or
doc block imports or calls a name the SDK deprecated, except the SDK's own aliases and
the test of those aliases.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import tamto_sdk

ROOT = Path(__file__).resolve().parents[2]
#: Where old names appear on purpose: the aliases and their test.
ALLOWED = {
    "libs/sdk/src/tamto_sdk/__init__.py",
    "libs/sdk/src/tamto_sdk/_deprecated.py",
    "libs/sdk/tests/test_sdk_deprecated_names.py",
}
SKIPPED_DIRS = {".venv", ".git", ".uv", "node_modules", "v1", "__pycache__"}
#: Deprecated keyword arguments, by the SDK call that took them.
OLD_ARGUMENTS = {"producer": "linger_ms", "consumer": "type"}
#: Deprecated methods, by name (no other class in the tree has them).
OLD_METHODS = {"next_batch"}
OLD_IN_DOCS = re.compile(
    r"\b(?:linger_ms=|type=SubscriptionType|\.next_batch\(|tamto_sdk\.Subscription\b)"
)


def old_module_names() -> set[str]:
    """The names `tamto_sdk` still answers with a warning."""
    module = vars(tamto_sdk)
    return set(module["_MOVED"]) | set(module["_RENAMED"])


def sources(suffix: str) -> Iterator[Path]:
    for path in ROOT.rglob(f"*{suffix}"):
        relative = path.relative_to(ROOT)
        if SKIPPED_DIRS.isdisjoint(relative.parts) and str(relative) not in ALLOWED:
            yield path


def old_uses(tree: ast.AST, old: set[str]) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tamto_sdk":
            for alias in node.names:
                if alias.name in old:
                    yield node.lineno, f"from tamto_sdk import {alias.name}"
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id == "tamto_sdk" and node.attr in old:
                yield node.lineno, f"tamto_sdk.{node.attr}"
            if node.attr in OLD_METHODS:
                yield node.lineno, f".{node.attr}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            argument = OLD_ARGUMENTS.get(node.func.attr)
            if argument is not None and any(k.arg == argument for k in node.keywords):
                yield node.lineno, f".{node.func.attr}({argument}=...)"


def test_no_python_file_uses_a_deprecated_sdk_name() -> None:
    old = old_module_names()
    assert {"NotFound", "Subscription"} <= old  # what the check looks for is still there
    found = [
        f"{path.relative_to(ROOT)}:{line}: {use}"
        for path in sources(".py")
        for line, use in old_uses(ast.parse(path.read_text(), str(path)), old)
    ]
    assert found == [], "\n".join(found)


def test_no_doc_uses_a_deprecated_sdk_name() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources(".md")
        if path.name != "CHANGELOG.md" and path.relative_to(ROOT) != Path("docs/sdk.md")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OLD_IN_DOCS.search(line)
    ]
    assert found == [], "\n".join(found)


def test_the_check_finds_an_old_name() -> None:
    """The walk above would report each kind of old use."""
    code = (
        "from tamto_sdk import NotFound\n"
        "tamto_sdk.Subscription\n"
        "client.producer('s', linger_ms=5)\n"
        "client.consumer('s', 'x', type=t)\n"
        "sub.next_batch()\n"
    )
    uses = [use for _, use in old_uses(ast.parse(code), old_module_names())]
    assert uses == [
        "from tamto_sdk import NotFound",
        "tamto_sdk.Subscription",
        ".producer(linger_ms=...)",
        ".consumer(type=...)",
        ".next_batch",
    ]
