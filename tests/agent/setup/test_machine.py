"""--parallel auto and --precision auto: what they become for the device trials run on."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import recipelab
from recipelab.agent.setup.machine import AUTO_MEMORY_HEADROOM, auto_parallel, resolve_auto
from recipelab.agent.setup.settings import CampaignSettings, ExecutorSettings, SettingsError
from recipelab.units import GIB
from tests.guardrails.factories import CPU, H100, OLD_CPU

PEAK = GIB  # a baseline predicted to peak at 1 GiB


def test_a_new_campaign_asks_for_auto_trials_in_flight_and_auto_precision() -> None:
    settings = CampaignSettings(name="n")
    assert (settings.executor.parallel, settings.precision) == ("auto", "auto")
    with pytest.raises(SettingsError, match="--parallel auto has not been resolved"):
        _ = settings.executor.resolved_parallel


def test_on_a_cpu_auto_runs_one_trial_per_core_with_one_thread_each() -> None:
    trials, why = auto_parallel(CPU, cores=8, peak_bytes=PEAK)
    assert trials == 8
    assert "one 1-thread trial per core on 8 core(s)" in why
    resolved, _ = resolve_auto(CampaignSettings(name="n"), CPU, cores=8, peak_bytes=PEAK)
    assert resolved.executor.resolved_parallel == 8
    assert resolved.executor.trial_threads(cores=8) == 1


def test_on_a_cpu_memory_bounds_the_trials_in_flight() -> None:
    room_for_three = CPU.memory_bytes // int(3 * AUTO_MEMORY_HEADROOM)
    trials, why = auto_parallel(CPU, cores=8, peak_bytes=room_for_three)
    assert trials == 3
    assert "bounded by memory" in why


def test_the_reserve_for_an_llm_server_is_not_memory_for_trials() -> None:
    free = auto_parallel(CPU, cores=8, peak_bytes=PEAK)[0]
    reserved = auto_parallel(CPU, cores=8, peak_bytes=PEAK, reserve_bytes=CPU.memory_bytes - 4 * GIB)[0]
    assert reserved == 2 < free


def test_auto_never_goes_below_one_trial() -> None:
    assert auto_parallel(CPU, cores=8, peak_bytes=CPU.memory_bytes * 10)[0] == 1


def test_on_one_gpu_auto_runs_one_trial() -> None:
    assert auto_parallel(H100, cores=64, peak_bytes=PEAK)[0] == 1


def test_with_ray_auto_runs_what_the_cluster_can() -> None:
    trials, why = auto_parallel(H100, cores=2, peak_bytes=PEAK, executor_slots=16)
    assert trials == 16
    assert "Ray cluster" in why


@pytest.mark.parametrize(("device", "precision"), [(CPU, "bf16"), (OLD_CPU, "fp32"),
                                                   (H100, "bf16")])
def test_auto_precision_is_the_campaigns_and_its_baselines(device: object, precision: str) -> None:
    resolved, notes = resolve_auto(CampaignSettings(name="n"), device,  # type: ignore[arg-type]
                                   cores=2, peak_bytes=PEAK)
    assert resolved.precision == precision
    assert resolved.baseline().precision == precision
    assert any(note.startswith(f"precision auto: {precision}") for note in notes)


def test_explicit_values_are_kept() -> None:
    settings = CampaignSettings(name="n", precision="fp32", executor=ExecutorSettings(parallel=3))
    resolved, notes = resolve_auto(settings, CPU, cores=8, peak_bytes=PEAK)
    assert (resolved.executor.parallel, resolved.precision, notes) == (3, "fp32", [])
    assert resolved.baseline().precision == "fp32"


SRC = Path(recipelab.__file__).parent
RESOLVERS = {"resolve_auto", "auto_parallel", "campaign_precision"}
"""The functions that turn ``auto`` into a number or a precision."""
RESOLVE_CALLERS = {("agent/setup/build.py", "where_trials_run"),
                   ("agent/campaign.py", "__init__")}
"""Who calls :func:`resolve`: the build step (agent/setup/build.py), once per command, before the
preflight; and a campaign built from raw settings (a library caller's; the command hands it
the resolved ones)."""


def calls_by_function(module: Path, names: set[str]) -> set[tuple[str, str]]:
    """(module, enclosing function) of every call in ``module`` to a function in ``names``."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
                continue
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                    and child.func.id in names):
                found.add((module.relative_to(SRC).as_posix(), function))
            visit(child, function)

    visit(ast.parse(module.read_text()), "<module>")
    return found


def test_auto_is_resolved_in_one_place() -> None:
    """``auto`` is decided by :func:`resolve` alone, and only the command (once) and a campaign
    given raw settings call it: a second resolution elsewhere could disagree with the saved
    settings the preflight checked."""
    modules = sorted(SRC.rglob("*.py"))
    resolving = set().union(*(calls_by_function(m, RESOLVERS) for m in modules))
    assert {module for module, _ in resolving} == {"agent/setup/machine.py"}
    callers = set().union(*(calls_by_function(m, {"resolve"}) for m in modules
                            if "recipelab.agent.setup.machine import" in m.read_text()))
    assert callers == RESOLVE_CALLERS
