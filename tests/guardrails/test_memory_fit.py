"""memory_fit: a line through measured peaks, saved per device and family, used by the guardrail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recipelab.envelope import EnvelopePoint, SweepAxes, run_points
from recipelab.guardrails import DeviceInfo, check_memory, detect_device
from recipelab.guardrails.memory import analytic_peak_bytes
from recipelab.guardrails.memory_fit import (
    MemoryModelError,
    fit_line,
    fitted_line,
    held_out_errors,
    load_memory_model,
    memory_model_path,
    micro_batch_tokens,
    read_for_guardrail,
    recipe_family,
    record_peaks,
)
from recipelab.runner import LocalExecutor
from recipelab.targets import get_target, proxy_recipe
from recipelab.trainer.spec import CorpusSpec
from tests.guardrails.factories import CPU, context

TINY = proxy_recipe("tiny")
FIT_BATCHES = (4, 128)
HELD_OUT_BATCHES = (32, 256)  # one between the fitted points, one beyond them
SEQ_LEN = 64


@pytest.fixture(scope="module")
def sweep_points(tmp_path_factory: pytest.TempPathFactory,
                 corpus: CorpusSpec) -> Iterator[tuple[DeviceInfo, list[EnvelopePoint]]]:
    """Real trainer runs of the tiny proxy at four batch sizes (three steps each)."""
    device = detect_device()
    axes = SweepAxes(batch_sizes=FIT_BATCHES + HELD_OUT_BATCHES, seq_lens=(SEQ_LEN,),
                     precisions=("fp32",), steps=3, warmup=1)
    executor = LocalExecutor(warm=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")  # the trainer subprocesses share two cores
        try:
            points = run_points(TINY, axes, get_target("toy"), device, executor,
                                tmp_path_factory.mktemp("sweep"), corpus, trial_device="cpu",
                                timeout_s=240)
        finally:
            executor.close()
    assert all(p.status == "complete" and p.peak_memory_bytes for p in points), points
    yield device, points


def peaks(points: list[EnvelopePoint], batches: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(p.tokens_per_step, p.peak_memory_bytes or 0) for p in points if p.batch_size in batches]


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("RECIPELAB_MEMORY_MODEL", raising=False)
    monkeypatch.setenv("RECIPELAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_line_through_measured_peaks_predicts_held_out_points_within_10_percent(
        sweep_points: tuple[DeviceInfo, list[EnvelopePoint]]) -> None:
    _, points = sweep_points
    line = fit_line(peaks(points, FIT_BATCHES))
    assert line is not None and line.a_bytes_per_token > 0, "activations cost memory per token"
    for tokens, measured in peaks(points, HELD_OUT_BATCHES):
        error = abs(line.predict(tokens) - measured) / measured
        assert error < 0.10, f"{tokens} tokens: predicted {line.predict(tokens)}, measured {measured}"


def test_the_guardrail_rejects_above_the_budget_and_accepts_below_by_the_saved_line(
        sweep_points: tuple[DeviceInfo, list[EnvelopePoint]], private_cache: Path) -> None:
    device, points = sweep_points
    record_peaks(TINY, device, peaks(points, FIT_BATCHES + HELD_OUT_BATCHES))
    saved = json.loads((private_cache / "memory-model.json").read_text())
    (entry,) = saved["fits"].values()
    assert entry["machine"]["name"] == device.name and entry["machine"]["host"]
    assert entry["family"] == recipe_family(TINY) and len(entry["points"]) == 4

    model = load_memory_model()
    line = fitted_line(model, TINY, device)
    assert line is not None
    fits = TINY.apply({"batch_size": 256})
    too_big = TINY.apply({"batch_size": 2048})
    budget = (line.predict(micro_batch_tokens(fits)) + line.predict(micro_batch_tokens(too_big))) // 2
    ctx = context(device=device, memory_reserve_bytes=device.memory_bytes - budget,
                  memory_model=model)

    assert check_memory(fits, ctx) == []
    (reason,) = check_memory(too_big, ctx)
    assert "batch_size 2048 x seq_len 64 exceeds" in reason
    assert "Predicted by the memory line fitted on this device" in reason
    assert "KiB per token" in reason and "from 4 measured points" in reason


def test_without_a_line_for_the_device_and_family_the_guardrail_uses_the_analytic_model(
        private_cache: Path) -> None:
    big = TINY.apply({"batch_size": 512})
    model = record_peaks(big, CPU, [(256, 400 * 2**20), (8192, 500 * 2**20)])  # fp32 on Test Xeon
    bf16 = big.apply({"precision": "bf16"})
    assert fitted_line(model, bf16, CPU) is None
    ctx = context(memory_reserve_bytes=CPU.memory_bytes - analytic_peak_bytes(bf16, CPU) + 1,
                  memory_model=model)
    (reason,) = check_memory(bf16, ctx)
    assert "Predicted by the analytic memory model (calibration factor 1.00)" in reason


def test_a_family_is_what_shape_and_precision_determine() -> None:
    family = recipe_family(TINY)
    same: list[dict[str, Any]] = [{"batch_size": 64}, {"seq_len": 32}, {"steps": 500},
                                  {"seed": 7}, {"grad_accum": 4}, {"optimizer.lr": 0.1},
                                  {"schedule.kind": "linear"}]
    for edit in same:
        assert recipe_family(TINY.apply(edit)) == family, edit
    other: list[dict[str, Any]] = [{"precision": "bf16"}, {"shape.n_layer": 3},
                                   {"shape.qk_norm": True}]
    for edit in other:
        assert recipe_family(TINY.apply(edit)) != family, edit


def test_a_line_needs_two_token_counts_and_recovers_an_exact_line() -> None:
    assert fit_line([(100, 5_000)]) is None
    assert fit_line([(100, 5_000), (100, 5_200)]) is None
    points = [(t, 1536 * t + 5 * 2**30) for t in (4096, 8192, 16384, 32768)]
    line = fit_line(points)
    assert line is not None
    assert line.a_bytes_per_token == pytest.approx(1536)
    assert line.b_bytes == pytest.approx(5 * 2**30)
    assert max(held_out_errors(points)) == pytest.approx(0, abs=1e-9)
    assert held_out_errors(points[:2]) == [], "two points leave nothing to hold out"


def test_an_unusable_memory_model_is_reported_left_untouched_and_the_analytic_model_used(
        private_cache: Path) -> None:
    path = memory_model_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"fits": "not a mapping"}')
    with pytest.raises(MemoryModelError, match=r"memory-model\.json is not valid.*envelope"):
        record_peaks(TINY, CPU, [(256, 400 * 2**20)])
    assert path.read_text() == '{"fits": "not a mapping"}'
    with pytest.raises(MemoryModelError):
        load_memory_model()
    model, problem = read_for_guardrail()
    assert model is None and problem and "is not valid" in problem
    big = TINY.apply({"batch_size": 512})
    ctx = context(memory_reserve_bytes=CPU.memory_bytes - analytic_peak_bytes(big, CPU) + 1,
                  memory_model_problem=problem)
    (reason,) = check_memory(big, ctx)
    assert "analytic memory model" in reason and "the fitted model is unusable" in reason


def test_the_guardrail_uses_the_memory_model_it_is_given_and_reads_no_file(
        private_cache: Path) -> None:
    """A check's inputs are its arguments: a line saved on disk predicts nothing until the
    caller hands the model over, so two contexts in one process never share a hidden one."""
    big = TINY.apply({"batch_size": 512})
    model = record_peaks(big, CPU, [(256, 400 * 2**20), (8192, 500 * 2**20)])
    reserve = CPU.memory_bytes - analytic_peak_bytes(big, CPU) + 1  # the analytic model: too big
    (reason,) = check_memory(big, context(memory_reserve_bytes=reserve))
    assert "Predicted by the analytic memory model" in reason
    assert check_memory(big, context(memory_reserve_bytes=reserve, memory_model=model)) == []
