"""The fenced code blocks of README.md and docs/*.md, for the tests that run them.

tests/e2e/test_doc_blocks.py runs the SDK and CLI blocks against a real system and
accounts for every block; tests/spark/test_spark_doc_blocks.py runs the Spark ones.
A block's key is its page and its first line, so it reads as what it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Languages of code; other blocks (json, layouts of files) are not run.
CODE = {"python", "bash", "sh", "console", "shell"}
#: The address the docs use for a local system; a test's cluster URL replaces it.
DOC_URL = "tamto://127.0.0.1:7400"
#: The blocks that need a SparkSession: tests/spark/test_spark_doc_blocks.py runs them.
SPARK_BLOCKS = [
    'docs/segments.md: spark.read.parquet("<data-dir>/streams/orders")  '
    "# every sealed message, `partition` from the path",
    'docs/spark.md: df = spark.read.parquet(".tamto/storage/streams/orders")',
    'docs/spark.md: path = ".tamto/storage/streams/orders"',
]


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, first line, language and text."""

    page: str
    line: int
    lang: str
    text: str
    key: str


def blocks() -> list[Block]:
    """Every fenced block of the README and docs/*.md, keyed by page and first line."""
    found: list[Block] = []
    fence = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
    for path in PAGES:
        text = path.read_text()
        page = str(path.relative_to(ROOT))
        seen: dict[str, int] = {}
        for match in fence.finditer(text):
            body = match.group(2)
            first = next((line.strip() for line in body.splitlines() if line.strip()), "")
            key = f"{page}: {first}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key += f" #{seen[key]}"
            line = text[: match.start()].count("\n") + 1
            found.append(Block(page, line, match.group(1), body, key))
    return found


def code_blocks() -> list[Block]:
    return [b for b in blocks() if b.lang in CODE]


def page_blocks(page: str) -> list[Block]:
    return [b for b in code_blocks() if b.page == page]
