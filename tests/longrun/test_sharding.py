"""A sharded long run (FSDP2 over gloo, ``--sharding full``) trains what an unsharded one
trains, checkpoints in shards, resumes after a SIGKILL on the same curve, and refuses a resume
that mixes sharded and unsharded checkpoints. ``auto`` shards only where the memory model says
a whole copy does not fit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_model
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.longrun.distributed import World
from recipelab.longrun.pretrain_config import CHECKPOINT_DIR
from recipelab.longrun.run import run_pretrain
from recipelab.longrun.sharding import SHARDS, ShardingError, resolve
from recipelab.recipe import Recipe
from recipelab.targets import get_target, proxy_recipe
from recipelab.trainer.checkpoint import CheckpointMismatch
from recipelab.trainer.core import build_model
from recipelab.trainer.spec import CorpusSpec
from tests.longrun.test_run import POLL_S, config, curve, events, launch, metrics

STEPS = 12
KNOBS_MOVED = {"stability.z_loss": 0.001, "stability.logit_softcap": 15.0,
               "stability.init_std": 0.04, "stability.depth_scaled_init": False,
               "optimizer.lr_embed_mult": 3.0, "optimizer.lr_hidden_mult": 0.3,
               "grad_accum": 2, "steps": STEPS}
CPU = torch.device("cpu")
KILLED_STEPS = 90  # long enough that the kill lands well before the last checkpoint
FINALIZER_MARK = """import atexit, os
if "RANK" in os.environ:  # a rank, not torchrun itself
    atexit.register(lambda: open(os.path.join({marks!r}, f"finalized-{{os.getpid()}}"), "w").close())
"""


def torchrun(recipe: Path, out: Path, corpus: CorpusSpec, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "2", "-m", "recipelab", "pretrain", "--recipe", str(recipe), "--out", str(out),
            "--corpus", corpus.source, "--device", "cpu", "--sharding", "full", *extra]


def kill_every_process_writing(out: Path) -> None:
    """SIGKILL every process whose command line names ``out``, and wait until none is left."""
    def writers() -> list[int]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:  # gone, or not a process
                continue
            if proc.name.isdigit() and str(out) in line:
                found.append(int(proc.name))
        return found

    for pid in writers():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while writers() and time.monotonic() < deadline:
        time.sleep(POLL_S)


def test_two_sharded_processes_follow_one_unsharded_for_a_recipe_with_every_knob_moved(
        tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str]) -> None:
    recipe = proxy_recipe("tiny").apply(KNOBS_MOVED)
    path = tmp_path / "recipe.json"
    path.write_text(recipe.model_dump_json())
    single = tmp_path / "one"
    run_pretrain(config(single, corpus, log_every=1, eval_every=6, checkpoint_every=0)
                 .model_copy(update={"recipe": recipe}))
    sharded, hooks = tmp_path / "two", tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(FINALIZER_MARK.format(marks=str(tmp_path)))
    path_with_hooks = os.pathsep.join(filter(None, [str(hooks), trainer_env.get("PYTHONPATH")]))
    launch(torchrun(path, sharded, corpus, "--log-every", "1", "--eval-every", "6",
                    "--checkpoint-every", "0"),
           {**trainer_env, "RECIPELAB_CACHE": corpus.cache_dir or "", "PYTHONPATH": path_with_hooks},
           timeout=300)
    assert not list(tmp_path.glob("finalized-*")), (
        "a rank ran Python's finalizer, where gloo's late frees abort it (exit_rank)")
    one, two = metrics(single), metrics(sharded)
    assert len(one) == len(two) == STEPS
    for a, b in zip(one, two, strict=True):
        assert float(b["train_loss"]) == pytest.approx(float(a["train_loss"]), rel=1e-4)
        assert float(b["param_norm"]) == pytest.approx(float(a["param_norm"]), rel=1e-4)
        if a["val_bpb"]:
            assert float(b["val_bpb"]) == pytest.approx(float(a["val_bpb"]), rel=1e-4)
    start = next(e for e in events(sharded) if e["event"] == "pretrain_start")
    assert start["sharded"] is True and start["sharding"] == "--sharding full"
    final = build_model(recipe, CPU)
    load_model(final, str(sharded / "final.safetensors"))  # gathered whole, as unsharded runs write it
    reference = build_model(recipe, CPU)
    load_model(reference, str(single / "final.safetensors"))
    for (name, a), b in zip(reference.state_dict().items(), final.state_dict().values(), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), name


def test_a_sharded_run_killed_mid_run_resumes_on_the_uninterrupted_curve(
        tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str]) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(proxy_recipe("tiny").apply({"steps": KILLED_STEPS}).model_dump_json())
    env = {**trainer_env, "RECIPELAB_CACHE": corpus.cache_dir or ""}
    args = ("--log-every", "4", "--eval-every", "8", "--checkpoint-every", "6", "--keep-last", "2")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    launch(torchrun(recipe, whole, corpus, *args), env, timeout=300)
    process = subprocess.Popen(torchrun(recipe, killed, corpus, *args), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    latest = killed / CHECKPOINT_DIR / "latest"
    while not latest.exists() and process.poll() is None:
        time.sleep(POLL_S)
    os.killpg(process.pid, signal.SIGKILL)  # torchrun, then its ranks (own sessions): a lost node
    kill_every_process_writing(killed)
    process.wait(timeout=60)
    assert not (killed / "final.safetensors").exists(), "the run finished before it was killed"
    newest = killed / CHECKPOINT_DIR / latest.read_text().strip()
    assert (newest / SHARDS).is_dir() and json.loads((newest / "state.json").read_text())["sharded"]
    launch(torchrun(recipe, killed, corpus, *args, "--resume-from-latest"), env, timeout=300)
    assert curve(killed) == curve(whole)
    resumed = [e for e in events(killed) if e["event"] == "pretrain_start"]
    resumed_from = resumed[-1]["resumed_from"]
    assert isinstance(resumed_from, int) and 0 < resumed_from < KILLED_STEPS - 6, (
        "killed before its last checkpoint")
    with pytest.raises(CheckpointMismatch, match="--sharding full"):
        run_pretrain(config(killed, corpus, resume_from_latest=True, steps=30))


def test_auto_shards_only_where_a_whole_copy_does_not_fit_and_full_needs_two_processes() -> None:
    tiny, two = proxy_recipe("tiny"), World(rank=0, size=2)
    assert resolve("auto", tiny, two, CPU) == (
        False, "auto on CPU: a whole copy per process fits host memory")
    assert resolve("full", tiny, two, CPU) == (True, "--sharding full")
    assert resolve("none", tiny, two, CPU)[0] is False
    assert resolve("auto", tiny, World(), CPU) == (False, "one process: nothing to shard over")
    with pytest.raises(ShardingError, match="at least 2 processes"):
        resolve("full", tiny, World(), CPU)
    with pytest.raises(ShardingError, match="fp8"):
        resolve("full", tiny.apply({"precision": "fp8"}), two, CPU)


def test_a_sharding_that_cannot_run_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(proxy_recipe("tiny").apply({"steps": 3}).model_dump_json())
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["pretrain", "--recipe", str(recipe), "--out", str(out),
                                      "--device", "cpu", "--sharding", "full"])
    assert result.exit_code == 2 and "at least 2 processes" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_auto_on_a_gpu_reads_the_same_memory_model_the_export_chose_by(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Properties:
        total_memory = 80 * 2**30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Properties())
    target = get_target("llama2-7b")
    seven = Recipe(shape=target.shape, seq_len=target.context, batch_size=16, precision="bf16",
                   tokenizer="bpe")
    eight = World(rank=0, size=8)
    sharded, why = resolve("auto", seven, eight, torch.device("cuda", 0))
    assert sharded and "a whole copy per GPU needs" in why
    small = seven.model_copy(update={"shape": get_target("smollm2-135m").shape, "seq_len": 2048})
    assert resolve("auto", small, eight, torch.device("cuda", 0))[0] is False
