"""Specification of :mod:`recipelab.trainer.spec`: the contract between a launcher and the
trainer process. A :class:`~recipelab.trainer.spec.TrialSpec` goes in as JSON, one
:class:`~recipelab.trainer.spec.TrialResult` comes out as JSON, the curve is readable from the
log while the trial runs, and none of it needs torch."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from recipelab import __version__
from recipelab.errors import RecipelabError
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import (
    CorpusSpec,
    CurvePoint,
    DataError,
    EvalBlocks,
    Provenance,
    TrialResult,
    TrialSpec,
    code_version,
)

TINY = proxy_recipe("tiny")
CHECKOUT = Path(__file__).resolve().parents[2]


def spec(**fields: Any) -> TrialSpec:
    """A valid spec of the tiny preset, with ``fields`` changed."""
    return TrialSpec.model_validate({"trial_id": "p0001", "recipe": TINY, "out_dir": "out",
                                     **fields})


def test_a_spec_and_a_result_cross_the_process_boundary_as_json_unchanged() -> None:
    sent = spec(kind="stress", corpus=CorpusSpec(source="/data/shards", max_bytes=4096),
                device="cpu", threads=3, compile=True, timed_warmup_steps=0)
    assert TrialSpec.model_validate_json(sent.model_dump_json()) == sent
    result = TrialResult(
        trial_id="p0001", status="complete", val_bpb=2.5, steps_done=2,
        curve=[CurvePoint(step=2, loss=3.2, grad_norm=0.5, lr=1e-3)],
        losses=[3.4, None],  # a non-finite loss travels as null
        eval_blocks=EvalBlocks(nats=[1.0, 2.0], bytes=[3, 4]),
        provenance=Provenance(device="cpu:x86_64", host="h", code_version="0.1.0", python="3.11",
                              libraries={"torch": "2.13"}, seed=0, threads=1))
    assert TrialResult.model_validate_json(result.model_dump_json()) == result


@pytest.mark.parametrize("trial_id", ["p0001", "old.p0001", "s-1_2", "x" * 64])
def test_a_trial_id_of_up_to_64_letters_digits_dots_dashes_and_underscores_is_accepted(
    trial_id: str,
) -> None:
    assert spec(trial_id=trial_id).trial_id == trial_id


@pytest.mark.parametrize("trial_id", ["", "x" * 65, "a/b", "../p0001", "p 1", "p0001\n"])
def test_any_other_trial_id_is_refused_naming_the_field_since_it_becomes_a_path(
    trial_id: str,
) -> None:
    with pytest.raises(ValidationError, match=r"trial_id\n.*(pattern|at least|at most)"):
        spec(trial_id=trial_id)


def test_an_unknown_key_is_an_error_naming_it_never_silently_ignored() -> None:
    with pytest.raises(ValidationError, match=r"bogus_knob\n +Extra inputs are not permitted"):
        spec(bogus_knob=1)
    with pytest.raises(ValidationError, match=r"corpus\.bogus_knob"):
        spec(corpus={"source": "python-docs", "bogus_knob": 1})


@pytest.mark.parametrize(("field", "value"), [
    ("log_every", 0), ("checkpoint_every", -1), ("divergence_factor", 1.0),
    ("timed_warmup_steps", -1), ("telemetry_interval_s", 0.0), ("threads", 0),
    ("threads", 1025), ("device", "tpu"), ("kind", "final"),
    ("corpus.val_fraction", 0.0), ("corpus.val_fraction", 0.5), ("corpus.max_bytes", 1023),
])
def test_a_setting_out_of_its_range_is_refused_naming_the_field(field: str, value: Any) -> None:
    fields: dict[str, Any] = {field: value}
    if field.startswith("corpus."):
        fields = {"corpus": {field.removeprefix("corpus."): value}}
    with pytest.raises(ValidationError, match=rf"{field}\n"):
        spec(**fields)


def test_the_result_and_the_checkpoints_live_in_the_out_dir() -> None:
    sent = spec(out_dir="/runs/c1/p0001")
    assert sent.result_path == Path("/runs/c1/p0001/result.json")
    assert sent.checkpoint_path == Path("/runs/c1/p0001/checkpoint")


def test_a_result_is_complete_failed_or_interrupted_and_a_failure_has_a_known_reason() -> None:
    for known in ("oom", "nan", "diverged", "timeout", "crash", "disk_full"):
        assert TrialResult(trial_id="p", status="failed", reason=known).reason == known
    with pytest.raises(ValidationError, match=r"status\n"):
        TrialResult.model_validate({"trial_id": "p", "status": "running"})
    with pytest.raises(ValidationError, match=r"reason\n"):
        TrialResult.model_validate({"trial_id": "p", "status": "failed", "reason": "segfault"})


def test_a_curve_point_reads_back_from_the_line_it_logs_to_the_lines_precision() -> None:
    point = CurvePoint(step=40, loss=3.14159, grad_norm=0.98765, lr=0.00123456)
    assert point.log_line() == "step 40 loss 3.1416 grad_norm 0.988 lr 0.00123"
    (read,) = CurvePoint.from_log(point.log_line() + "\n")
    assert read.step == 40
    assert (read.loss, read.grad_norm, read.lr) == pytest.approx((3.1416, 0.988, 0.00123), rel=0)
    diverging = CurvePoint(step=45, loss=math.nan, grad_norm=math.inf, lr=1e-3)
    (read,) = CurvePoint.from_log(diverging.log_line() + "\n")
    assert math.isnan(read.loss) and read.grad_norm == math.inf, "a diverging point reads back too"


def test_reading_a_log_skips_other_lines_and_a_last_line_cut_short_mid_write() -> None:
    """The live report reads ``trial.log`` while the trainer appends to it."""
    lines = [CurvePoint(step=s, loss=3.0 / s, grad_norm=1.0, lr=1e-3).log_line() for s in (5, 10)]
    text = "".join(f"{line}\n" for line in ["trial p0001: 108,864 parameters on cpu", lines[0],
                                             "resumed from checkpoint at step 5", lines[1]])
    assert [p.step for p in CurvePoint.from_log(text)] == [5, 10]
    writing = "step 15 loss 0.2000 grad_norm 1.000 lr 1e-05"
    for cut in range(1, len(writing) + 1):  # "lr 1" would read as a rate of 1
        assert CurvePoint.from_log(text + writing[:cut]) == CurvePoint.from_log(text), cut
    assert CurvePoint.from_log(f"{text}{writing}\n")[-1].lr == 1e-05, "once ended, it counts"


@pytest.mark.skipif(not (CHECKOUT / ".git").exists() or shutil.which("git") is None,
                    reason="needs a git checkout")
def test_in_a_checkout_the_code_version_is_the_package_version_and_the_git_description() -> None:
    described = subprocess.run(["git", "-C", str(CHECKOUT), "describe", "--always", "--dirty"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert code_version() == f"{__version__}+{described}"


def test_without_git_the_code_version_is_the_package_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no git program to run
    assert code_version() == __version__


def test_a_launcher_reads_and_writes_the_contract_without_importing_torch(tmp_path: Path) -> None:
    code = ("import sys\n"
            "from recipelab.targets import proxy_recipe\n"
            "from recipelab.trainer.spec import TrialResult, TrialSpec, code_version\n"
            f"TrialSpec(trial_id='p', recipe=proxy_recipe('tiny'), out_dir={str(tmp_path)!r})\n"
            "TrialResult(trial_id='p', status='complete').model_dump_json()\n"
            "code_version()\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"


def test_bad_training_data_is_a_recipelab_error_callers_catch_as_a_value_error() -> None:
    error = DataError("corpus.txt is empty: give a file that contains text")
    assert isinstance(error, RecipelabError) and isinstance(error, ValueError)
