"""``recipelab gpu-check``: its CPU half end to end in real processes (a bf16 proxy trial, a
2-process gloo pretrain killed with SIGTERM after its first checkpoint and resumed), and
what its table and gpu-check.json say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.envelope.gpu_check import (
    PRETRAIN_STEPS,
    REPORT_FILE,
    GpuCheckReport,
    ResumeCheck,
    TrialCheck,
    how_it_stopped,
    pretrain_recipe,
    render_table,
    trial_plan,
)
from recipelab.guardrails.base import DeviceInfo
from recipelab.guardrails.hardware import resolve_device
from recipelab.trainer.spec import CorpusSpec

GIB = 2**30
CPU = DeviceInfo("cpu", "a CPU", 64 * GIB, None, False, native_bf16=False)
CPU_BF16 = DeviceInfo("cpu", "a CPU with AVX512-BF16", 64 * GIB, None, False, native_bf16=True)
H100 = DeviceInfo("cuda", "NVIDIA H100", 80 * GIB, (9, 0), True, native_bf16=True)
A100_NO_TE = DeviceInfo("cuda", "NVIDIA A100", 80 * GIB, (8, 0), False, native_bf16=True)


def test_the_cpu_half_runs_end_to_end_and_writes_the_report(
        tmp_path: Path, corpus: CorpusSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("RECIPELAB_CACHE", corpus.cache_dir or "")
    out = tmp_path / "check"
    result = CliRunner().invoke(app, ["gpu-check", "--out", str(out), "--device", "cpu",
                                      "--threads", "1", "--corpus", corpus.source])
    assert result.exit_code == 0, result.output
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["passed"] is True and report["device"] == "cpu"
    bf16, fp8 = report["trials"]
    expected = "bf16" if resolve_device("cpu").native_bf16 else "fp32"
    assert (bf16["precision"], bf16["preset"], bf16["status"]) == (expected, "tiny", "passed")
    assert bf16["steps"] == 20 and 0 < bf16["val_bpb"] < 10 and bf16["tokens_per_s"] > 0
    assert fp8["status"] == "skipped" and "CUDA GPU" in fp8["note"]
    run = report["pretrain"]
    assert (run["world_size"], run["backend"], run["status"]) == (2, "gloo", "passed")
    assert run["checkpoint_at_signal"] == 10 and run["killed_at_step"] >= 10
    assert run["launcher_exit"] != 0 and "torchrun exited" in run["how_it_stopped"]
    assert 10 <= run["resumed_from"] <= run["killed_at_step"]
    assert run["final_steps"] == PRETRAIN_STEPS and run["every_step_once"] is True
    assert 0 < run["final_val_bpb"] < 10
    assert report["cluster"]["world_size"] == 2 and report["cluster"]["torch"] == torch.__version__
    for shown in ("proxy (tiny)", "pretrain (2 × gloo)", "every check passed", REPORT_FILE):
        assert shown in result.stdout, shown


def report(pretrain_status: str = "passed", **pretrain: object) -> GpuCheckReport:
    return GpuCheckReport(
        device="cuda", device_name="NVIDIA H100",
        trials=[TrialCheck("bf16", "cpu", "passed", 60, 1.9512, 1.25e6),
                TrialCheck("fp8", "cpu", "skipped", note="precision 'fp8' needs TransformerEngine")],
        pretrain=ResumeCheck(world_size=8, backend="nccl", precision="bf16",
                             status=pretrain_status,  # type: ignore[arg-type]
                             killed_at_step=12, checkpoint_at_signal=10, launcher_exit=1,
                             how_it_stopped="torchrun exited with status 1", resumed_from=12,
                             final_steps=30, final_val_bpb=2.0345, tokens_per_s=9.5e6,
                             every_step_once=True, **pretrain))  # type: ignore[arg-type]


def shown(table_report: GpuCheckReport) -> str:
    console = Console(record=True, width=200)
    console.print(render_table(table_report))
    return console.export_text()


def test_the_table_has_a_row_per_trial_and_one_for_the_long_run() -> None:
    text = shown(report())
    assert "on cuda (NVIDIA H100): every check passed" in text
    assert "1.9512" in text and "1,250,000" in text and "skipped" in text
    assert "needs TransformerEngine" in text
    assert "pretrain (8 × nccl)" in text and "2.0345" in text and "9,500,000" in text
    assert "killed at step 12 (newest checkpoint then: 10)" in text
    assert "resumed from step 12" in text and "every step once: yes" in text


def test_a_skipped_fp8_trial_passes_and_a_failed_long_run_fails_the_check() -> None:
    assert report().passed and report().to_json()["passed"] is True
    failed = report("failed", note="the resumed run exited with status 1")
    assert not failed.passed and failed.to_json()["passed"] is False
    text = shown(failed)
    assert "a check FAILED" in text and "FAILED" in text and "exited with status 1" in text
    assert json.loads(json.dumps(failed.to_json()))["pretrain"]["note"] == (
        "the resumed run exited with status 1")


def test_how_a_killed_run_stopped_is_read_from_what_it_left() -> None:
    graceful = how_it_stopped(143, 10, 17, "pretrain_interrupted")
    assert "status 143" in graceful and "checkpoint at step 17 on its way out" in graceful
    died = how_it_stopped(1, 10, 10, "checkpoint")
    assert "without a checkpoint of its own" in died and "after 10" in died
    assert "died of signal 15" in how_it_stopped(-15, 10, 10, "step")


@pytest.mark.parametrize(("device", "plan"), [
    (CPU_BF16, [("bf16", "bf16"), (None, "fp8")]),
    (CPU, [("fp32", "bf16"), (None, "fp8")]),  # bf16 would be emulated: fp32 instead
    (H100, [("bf16", "bf16"), ("fp8", "fp8")]),
    (A100_NO_TE, [("bf16", "bf16"), (None, "fp8")]),
], ids=["cpu-bf16", "cpu", "h100-te", "a100"])
def test_each_precision_runs_where_the_guardrails_accept_it(
        device: DeviceInfo, plan: list[tuple[str | None, str]]) -> None:
    steps = trial_plan(device, "cpu" if device.kind == "cuda" else "tiny")
    assert [(run, asked) for run, asked, _ in steps] == plan
    for run, asked, why in steps:
        assert (why is None) == (run == asked), why
    if device is A100_NO_TE:
        assert "TransformerEngine" in str(steps[1][2]) and "8.9" in str(steps[1][2])


def test_the_long_runs_batch_splits_over_every_gpu() -> None:
    assert pretrain_recipe(CPU, 2).batch_size == 8 and pretrain_recipe(CPU, 2).precision == "fp32"
    three = pretrain_recipe(H100, 3)
    assert (three.batch_size, three.precision, three.steps) == (18, "bf16", PRETRAIN_STEPS)


def test_a_cuda_check_without_a_gpu_says_what_to_do(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = CliRunner().invoke(app, ["gpu-check", "--out", str(tmp_path / "x"), "--device", "cuda"])
    assert result.exit_code == 2 and "use --device cpu" in result.stderr


def test_a_used_output_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "old.log").write_text("an earlier check")
    result = CliRunner().invoke(app, ["gpu-check", "--out", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 2 and "is not empty" in result.stderr
