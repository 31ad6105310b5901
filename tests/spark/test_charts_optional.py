"""matplotlib is the `charts` extra of tamto-spark: without it, asking for a chart says
which extra to install, before any Spark work, and `--no-chart` needs none."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import pytest

from tamto_spark.pipelines import dead_letters, traffic
from tamto_spark.pipelines.common import ChartsUnavailable, pyplot


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed


def test_pyplot_is_agg_when_installed() -> None:
    plt = pyplot()
    assert plt.get_backend().lower() == "agg"


@pytest.mark.usefixtures("no_matplotlib")
def test_without_matplotlib_a_chart_names_the_extra() -> None:
    with pytest.raises(ChartsUnavailable, match=r"pip install 'tamto-spark\[charts\]'"):
        pyplot()


@pytest.mark.usefixtures("no_matplotlib")
@pytest.mark.parametrize("main", [traffic.main, dead_letters.main])
def test_a_pipeline_asked_for_a_chart_stops_before_spark(
    main: Callable[[Sequence[str] | None], int], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--data-dir", "nowhere", "--stream", "s", "--out", "out"])
    assert exited.value.code == 2
    assert "tamto-spark[charts]" in capsys.readouterr().err
