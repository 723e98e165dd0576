"""Specification of checkpoints: a round trip restores everything, only a completed
``latest`` switch counts, and a stress run killed with SIGKILL resumes to exactly the curve
an uninterrupted run draws."""

from __future__ import annotations

import io
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from recipelab.recipe import Recipe
from recipelab.targets import proxy_recipe
from recipelab.trainer import checkpoint
from recipelab.trainer.core import build_optimizer
from recipelab.trainer.loop import run_trial
from recipelab.trainer.model import GPT
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec

TINY = proxy_recipe("tiny")
CPU = torch.device("cpu")


def trained(seed: int, steps: int = 2) -> tuple[GPT, torch.optim.AdamW]:
    """A tiny model and its AdamW after ``steps`` real steps (so the optimizer has state)."""
    torch.manual_seed(seed)
    model = GPT(TINY.shape, TINY.seq_len)
    optimizer = build_optimizer(model, TINY, CPU)
    for _ in range(steps):
        x = torch.randint(0, 256, (2, TINY.seq_len))
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten())
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def assert_same_optimizer_state(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["state"].keys() == sb["state"].keys()
    for index, slots in sa["state"].items():
        assert slots.keys() == sb["state"][index].keys()
        for name, value in slots.items():
            assert torch.equal(value, sb["state"][index][name]), (index, name)
    for ga, gb in zip(sa["param_groups"], sb["param_groups"], strict=True):
        assert {k: list(v) if isinstance(v, tuple) else v for k, v in ga.items()} == {
            k: list(v) if isinstance(v, tuple) else v for k, v in gb.items()}


# --- save and load ------------------------------------------------------------------------


def test_save_then_load_restores_model_optimizer_step_and_extra(tmp_path: Path) -> None:
    model, optimizer = trained(seed=1)
    extra = {"curve": [{"step": 10, "loss": 3.5, "grad_norm": 1.0, "lr": 0.01}]}
    checkpoint.save(tmp_path, 7, model, optimizer, extra)

    fresh_model, fresh_optimizer = trained(seed=2, steps=1)
    restored = checkpoint.load(tmp_path, fresh_model, fresh_optimizer)

    assert restored is not None
    assert (restored.step, restored.extra) == (7, extra)
    assert_same_state(model, fresh_model)
    assert_same_optimizer_state(optimizer, fresh_optimizer)


def test_a_restored_optimizer_takes_the_same_next_step_as_the_original(tmp_path: Path) -> None:
    model, optimizer = trained(seed=1)
    checkpoint.save(tmp_path, 2, model, optimizer, {})
    copy, copy_optimizer = trained(seed=2, steps=0)
    checkpoint.load(tmp_path, copy, copy_optimizer)
    x = torch.randint(0, 256, (2, TINY.seq_len), generator=torch.Generator().manual_seed(9))
    for m, opt in ((model, optimizer), (copy, copy_optimizer)):
        loss = torch.nn.functional.cross_entropy(m(x).flatten(0, 1), x.flatten())
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
    assert_same_state(model, copy)


def test_load_restores_the_torch_random_state_of_the_save(tmp_path: Path) -> None:
    model, optimizer = trained(seed=1)
    checkpoint.save(tmp_path, 2, model, optimizer, {})
    expected = torch.rand(4)
    torch.rand(100)
    checkpoint.load(tmp_path, model, optimizer)
    assert torch.equal(torch.rand(4), expected)


def test_tied_embeddings_stay_tied_after_a_load(tmp_path: Path) -> None:
    model, optimizer = trained(seed=1)
    checkpoint.save(tmp_path, 2, model, optimizer, {})
    fresh, fresh_optimizer = trained(seed=2, steps=0)
    checkpoint.load(tmp_path, fresh, fresh_optimizer)
    assert fresh.lm_head.weight is fresh.embed.weight
    assert torch.equal(fresh.embed.weight, model.embed.weight)


def test_a_directory_without_a_checkpoint_loads_nothing(tmp_path: Path) -> None:
    model, optimizer = trained(seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert checkpoint.load(tmp_path / "never-written", model, optimizer) is None
    assert checkpoint.load(tmp_path, model, optimizer) is None
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_partial_checkpoint_without_a_latest_switch_is_ignored(tmp_path: Path) -> None:
    model, optimizer = trained(seed=1)
    staging = tmp_path / ".step-00000040.partial"  # killed while writing the first checkpoint
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"\x00" * 10)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert checkpoint.load(tmp_path, model, optimizer) is None
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_newer_checkpoint_directory_is_ignored_until_latest_points_at_it(
    tmp_path: Path,
) -> None:
    at_20, optimizer_20 = trained(seed=1)
    checkpoint.save(tmp_path / "root", 20, at_20, optimizer_20, {"at": 20})
    at_40, optimizer_40 = trained(seed=3)
    checkpoint.save(tmp_path / "other", 40, at_40, optimizer_40, {"at": 40})
    # Killed after the step-40 directory was renamed into place, before `latest` switched:
    shutil.copytree(tmp_path / "other" / "step-00000040", tmp_path / "root" / "step-00000040")
    # ... and killed half-way through staging the one after it:
    (tmp_path / "root" / ".step-00000060.partial").mkdir()

    model, optimizer = trained(seed=5, steps=0)
    restored = checkpoint.load(tmp_path / "root", model, optimizer)
    assert restored is not None
    assert (restored.step, restored.extra) == (20, {"at": 20})
    assert_same_state(model, at_20)


def test_saving_a_new_checkpoint_switches_latest_and_removes_the_old_one(tmp_path: Path) -> None:
    model, optimizer = trained(seed=1)
    checkpoint.save(tmp_path, 20, model, optimizer, {})
    checkpoint.save(tmp_path, 40, model, optimizer, {})
    assert (tmp_path / "latest").read_text().strip() == "step-00000040"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000040"]


# --- resuming a trial in-process ----------------------------------------------------------


def trial(out_dir: Path, corpus: CorpusSpec, recipe: Recipe = TINY, *, resume: bool = False,
          **fields: object) -> TrialResult:
    spec = TrialSpec(trial_id="ckpt", kind="stress", recipe=recipe, corpus=corpus,
                     out_dir=str(out_dir), device="cpu", **fields)
    return run_trial(spec, resume=resume, log=io.StringIO())


def test_resume_mid_interval_gives_the_uninterrupted_curve(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    """A checkpoint at step 15 with a curve point every 10: the point at 20 must still
    average steps 11-20, as in a run that was never interrupted."""
    uninterrupted = trial(tmp_path, corpus, log_every=10, checkpoint_every=15)
    assert (tmp_path / "checkpoint" / "latest").read_text().strip() == "step-00000015"
    (tmp_path / "result.json").unlink(missing_ok=True)
    resumed = trial(tmp_path, corpus, resume=True, log_every=10, checkpoint_every=15)
    assert resumed.resumed_from_step == 15
    assert [p.step for p in resumed.curve] == [10, 20]
    assert [p.loss for p in resumed.curve] == pytest.approx(
        [p.loss for p in uninterrupted.curve], rel=1e-6)
    assert [p.grad_norm for p in resumed.curve] == pytest.approx(
        [p.grad_norm for p in uninterrupted.curve], rel=1e-6)


def test_resume_from_a_checkpoint_at_the_last_step_reports_the_finished_run(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    """Killed during the final evaluation: the checkpoint holds every step already."""
    finished = trial(tmp_path, corpus, log_every=10, checkpoint_every=10)
    resumed = trial(tmp_path, corpus, resume=True, log_every=10, checkpoint_every=10)
    assert resumed.status == "complete"
    assert resumed.resumed_from_step == TINY.steps
    assert resumed.curve == finished.curve
    assert resumed.val_bpb == pytest.approx(finished.val_bpb, rel=1e-6)
    assert resumed.steps_done == TINY.steps
    assert resumed.train_loss == finished.train_loss


def test_resume_without_a_checkpoint_starts_from_scratch(
    tmp_path: Path, corpus: CorpusSpec,
) -> None:
    result = trial(tmp_path, corpus, TINY.apply({"steps": 4}), resume=True, log_every=2)
    assert result.status == "complete"
    assert result.resumed_from_step is None
    assert [p.step for p in result.curve] == [2, 4]


# --- a stress run killed with SIGKILL -----------------------------------------------------

STRESS = TINY.apply({"steps": 120})


def stress_spec(out_dir: Path, corpus: CorpusSpec) -> Path:
    spec = TrialSpec(trial_id="stress", kind="stress", recipe=STRESS, corpus=corpus,
                     out_dir=str(out_dir), device="cpu", log_every=10, checkpoint_every=20)
    path = out_dir.with_suffix(".json")
    path.write_text(spec.model_dump_json())
    return path


def launch(spec: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    with spec.with_suffix(".out").open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", "recipelab.trainer", "--spec",
                                 str(spec), *args], stdout=log, stderr=subprocess.STDOUT,
                                env=env)


def checkpoint_step(out_dir: Path) -> int:
    """The step ``latest`` points at, or -1 before the first checkpoint."""
    try:
        return int((out_dir / "checkpoint" / "latest").read_text().strip().split("-")[1])
    except (FileNotFoundError, IndexError, ValueError):
        return -1


def test_a_stress_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_curve(
    tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str],
) -> None:
    whole_dir, killed_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    whole = launch(stress_spec(whole_dir, corpus), trainer_env)  # runs alongside the other
    killed_spec = stress_spec(killed_dir, corpus)
    victim = launch(killed_spec, trainer_env)
    while checkpoint_step(killed_dir) < 40:
        assert victim.poll() is None, "the trial ended before its step-40 checkpoint"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    assert not (killed_dir / "result.json").exists(), "the kill came after the trial finished"
    killed_at = checkpoint_step(killed_dir)
    assert killed_at % 20 == 0 and 40 <= killed_at < STRESS.steps

    assert launch(killed_spec, trainer_env, "--resume").wait() == 0
    assert whole.wait() == 0
    a = TrialResult.model_validate_json((whole_dir / "result.json").read_text())
    b = TrialResult.model_validate_json((killed_dir / "result.json").read_text())

    assert (a.status, b.status) == ("complete", "complete")
    assert (a.resumed_from_step, b.resumed_from_step) == (None, killed_at)
    assert [p.step for p in b.curve] == [p.step for p in a.curve] == list(range(10, 121, 10))
    assert [p.loss for p in b.curve] == pytest.approx([p.loss for p in a.curve], rel=1e-6)
    assert [p.grad_norm for p in b.curve] == pytest.approx(
        [p.grad_norm for p in a.curve], rel=1e-6)
    assert [p.lr for p in b.curve] == [p.lr for p in a.curve]
    assert b.val_bpb == pytest.approx(a.val_bpb, rel=1e-6)
    assert b.steps_done == STRESS.steps
    output = killed_spec.with_suffix(".out").read_text()
    assert f"resumed from checkpoint at step {killed_at}" in output
