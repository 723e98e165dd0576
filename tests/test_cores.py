"""The one count of cores: logical CPUs within the affinity mask, physical cores among them,
and the trial threads and ``--parallel auto`` that share it."""

from __future__ import annotations

import os

import psutil
import pytest

from recipelab import cores
from recipelab.agent.setup.settings_components import ExecutorSettings


def machine(monkeypatch: pytest.MonkeyPatch, *, allowed: int, cpus: int, physical: int) -> None:
    """A machine of ``physical`` cores and ``cpus`` logical CPUs, of which this process may
    use ``allowed``."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(allowed)), raising=False)
    monkeypatch.setattr(psutil, "cpu_count",
                        lambda logical=True: cpus if logical else physical)


def test_an_affinity_mask_leaves_fewer_cores_than_the_machine_has(
        monkeypatch: pytest.MonkeyPatch) -> None:
    machine(monkeypatch, allowed=4, cpus=16, physical=8)  # pinned to 4 CPUs, SMT 2
    assert cores.allowed_cpus() == 4
    assert cores.usable_cores() == 2, "4 allowed CPUs are 2 cores' hardware threads"
    machine(monkeypatch, allowed=6, cpus=8, physical=8)  # no SMT, a 6-CPU cpuset
    assert cores.usable_cores() == 6


def test_trial_threads_share_the_cores_the_process_may_use_not_the_machines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    machine(monkeypatch, allowed=4, cpus=64, physical=32)  # 2 cores of a big machine
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert ExecutorSettings(parallel=2).trial_threads() == 1
    assert ExecutorSettings(parallel=1).trial_threads() == 2
    assert ExecutorSettings(parallel=1, threads=3).trial_threads() == 3, "given: kept"


def test_this_machines_usable_cores_are_at_least_one_and_at_most_its_cpus() -> None:
    assert 1 <= cores.usable_cores() <= cores.allowed_cpus() <= (os.cpu_count() or 1)
