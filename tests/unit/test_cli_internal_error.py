"""A bug in a verb is one line that says how to get the traceback — in words that work: ``-v`` is the group's
option (``tiankong -v dedupe …``), and ``tiankong dedupe … -v`` is "No such option"."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from tiankong.cli import TiankongGroup, main


@pytest.fixture
def cli() -> click.Group:
    """The top-level group's own options and error handling, with one verb that has a bug."""
    @click.command("broken-verb")
    def verb() -> None:
        raise RuntimeError("a bug")

    return TiankongGroup(name="tiankong", params=main.params, callback=main.callback, commands=[verb])


def test_an_internal_error_names_the_verbose_option_where_it_works(cli: click.Group) -> None:
    broken = "broken-verb"
    result = CliRunner().invoke(cli, [broken])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: internal error RuntimeError: a bug") and "`tiankong -v broken-verb …`" in line
    verbose = CliRunner().invoke(cli, ["-v", broken])
    assert isinstance(verbose.exception, RuntimeError)  # the traceback, as the line promised
