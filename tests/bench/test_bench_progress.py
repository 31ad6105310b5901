"""The progress bar of `tamto bench`: each phase's label and how many phases are done.

Drives the command's own bar (`_progress`, the columns `bench` draws) through
`_Bar`, the adapter the runner reports its phases to, on a terminal console
writing to a string. Each frame is forced with `refresh()`, so no timing is involved.
"""

from __future__ import annotations

import io
import re
import sys

from rich.console import Console

from tamto_bench.command import _Bar, _progress

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PHASES = ("tamto publish 100 B", "tamto consume+ack 100 B", "tamto latency 100 B @ 500/s")


def _frames(labels: tuple[str, ...]) -> tuple[list[str], str]:
    """What the bar shows after `start` and after each phase, then what it writes on close."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    progress = _progress(console)
    frames: list[str] = []

    def frame() -> None:
        progress.refresh()
        frames.append(ANSI.sub("", out.getvalue()).split("\r")[-1])
        out.seek(0)
        out.truncate()

    with progress:
        bar = _Bar(progress)
        bar.start(len(labels))
        frame()
        for label in (*labels, "done"):
            bar.phase(label)
            frame()
    return frames, out.getvalue()


def test_bar_shows_each_phase_label_and_the_phases_done_of_all() -> None:
    frames, _ = _frames(PHASES)
    n = len(PHASES)
    assert frames[0].startswith("starting"), frames[0]
    assert f" 0/{n} " in frames[0], frames[0]
    # Phase i (0-based) is running: i phases are done.
    for i, label in enumerate(PHASES):
        shown = frames[i + 1]
        assert shown.startswith(label), shown
        assert f" {i}/{n} " in shown, shown
    assert frames[-1].startswith("done"), frames[-1]
    assert f" {n}/{n} " in frames[-1], frames[-1]
    # The bar itself fills as phases complete, and is full at the end.
    filled = [f.count("━") for f in frames[1:]]
    assert filled == sorted(filled), filled
    assert filled[0] == 0 < filled[1] < filled[-1], filled


def test_bar_is_transient_and_drawn_on_stderr() -> None:
    frames, closing = _frames(PHASES[:1])
    assert frames[-1].startswith("done"), frames
    # On close the bar is erased: the last thing written is "erase line" (ESC [2K)
    # after moving back up onto it, so no bar is left in the terminal's scrollback.
    tail = closing.rsplit("\n", 1)[-1]
    assert tail.endswith("\x1b[2K"), repr(closing)
    assert "\x1b[1A" in tail, repr(closing)
    # `bench` writes its tables on stdout; the bar must stay off it.
    assert _progress().console.file is sys.stderr
