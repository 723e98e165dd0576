"""Packages name their entry points and load them on first use (status and logs stay fast)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import pytest

import recipelab.agent
import recipelab.trainer

PACKAGES = [recipelab.agent, recipelab.trainer]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_exported_name_is_the_object_of_the_module_it_names(package: ModuleType) -> None:
    for name, module in package.EXPORTS.items():
        assert module.startswith(f"{package.__name__}."), "a package exports its own modules"
        assert getattr(package, name) is getattr(importlib.import_module(module), name)
    assert package.__all__ == sorted(package.EXPORTS)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_a_name_the_package_does_not_export_is_an_attribute_error(package: ModuleType) -> None:
    with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute"):
        package.nothing_here  # noqa: B018 - the attribute access is the test


def test_importing_the_packages_imports_no_torch() -> None:
    code = "import sys, recipelab.agent, recipelab.trainer; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"
