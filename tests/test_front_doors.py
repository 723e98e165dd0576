"""Every package has a front door: a docstring naming its entry points and an ``__all__``
whose every name resolves."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import recipelab

PACKAGES = sorted(m.name for m in pkgutil.walk_packages(recipelab.__path__, "recipelab.")
                  if m.ispkg)


def test_every_package_is_listed() -> None:
    assert {"recipelab.agent", "recipelab.trainer", "recipelab.longrun"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_the_package_names_its_entry_points(name: str) -> None:
    package = importlib.import_module(name)
    assert package.__doc__ and len(package.__doc__.strip()) > 40, f"{name} has no docstring"
    exported = getattr(package, "__all__", None)
    assert exported, f"{name} has no __all__"
    for entry in exported:
        assert getattr(package, entry) is not None, f"{name}.{entry}"
