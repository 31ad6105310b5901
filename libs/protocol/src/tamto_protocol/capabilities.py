"""The metadata by which a peer says what it can read, in a module without Arrow.

The SDK's call layer sets and reads these on every stream it opens, and `tamto`
commands that never touch a batch import that layer: keeping the keys here keeps
pyarrow and numpy out of them (`libs/cli/tests/test_cli_imports.py`).
"""

from __future__ import annotations

from typing import Final

#: Metadata saying "I read `SingleMessage`s" (its value is ignored;
#: `tamto_protocol.single_message`).
SINGLE_MESSAGE_METADATA: Final = "tamto-single-message"
