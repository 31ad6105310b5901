"""`tamto chaos`: a randomized fault campaign against a local system, and its checker.

`campaign` runs the system, the clients and the faults; `checker` judges what
they recorded; `command` is the CLI command. docs/recovery.md shows a report.
"""

from tamto_cli.chaos.command import chaos

__all__ = ["chaos"]
