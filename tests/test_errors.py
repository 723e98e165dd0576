"""One error root: every exception class recipelab defines derives from RecipelabError (and
keeps the builtin base its callers catch), so the CLI catches one class and prints its fix."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import typer

import recipelab
from recipelab.cli import common
from recipelab.errors import RecipelabError

MODULES = [m.name for m in pkgutil.walk_packages(recipelab.__path__, "recipelab.")
           if m.name != "recipelab.__main__" and not m.name.endswith("trainer.__main__")]


def defined_exceptions() -> list[type[BaseException]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        found += [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                  if issubclass(obj, BaseException) and obj.__module__ == name]
    return found


def test_every_exception_recipelab_defines_derives_from_the_root() -> None:
    found = defined_exceptions()
    assert len(found) >= 15
    assert [e.__qualname__ for e in found if not issubclass(e, RecipelabError)] == []


def test_bad_input_errors_are_still_value_errors() -> None:
    from recipelab.agent.setup.settings import SettingsError
    from recipelab.trainer.data import DataError

    assert issubclass(DataError, ValueError) and issubclass(SettingsError, ValueError)


def test_the_cli_prints_the_message_and_then_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as done:
        common.fail("the campaign directory is locked", "stop the other run first")
    assert done.value.exit_code == 2
    printed = capsys.readouterr().err.splitlines()
    assert printed == ["error: the campaign directory is locked", "fix: stop the other run first"]
