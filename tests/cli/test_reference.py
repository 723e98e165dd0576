"""The CLI reference pages (:mod:`recipelab.cli.reference`), generated from the commands'
own help: the pages in docs/ are what the help says now, and the generator refuses a folder
that is not there in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipelab.cli import reference

ROOT = Path(__file__).parents[2]


def test_the_cli_reference_is_what_the_commands_help_says() -> None:
    """docs/cli.md and docs/cli-run.md are generated; regenerate them after changing an
    option: ``python -m recipelab.cli.reference docs``."""
    stale = [name for name, text in reference.pages().items()
             if (ROOT / "docs" / name).read_text() != text]
    assert stale == [], f"run: python -m recipelab.cli.reference docs ({', '.join(stale)})"


@pytest.mark.parametrize("argv", [[], ["/no/such/folder"]])
def test_the_reference_generator_refuses_a_missing_folder_in_one_line(
        argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.argv", ["reference", *argv])
    with pytest.raises(SystemExit) as stopped:
        reference.main()
    assert stopped.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
