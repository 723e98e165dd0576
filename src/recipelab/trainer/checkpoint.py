"""Checkpoints for long (stress) runs: model, optimizer and RNG state in safetensors, plus a
small JSON for the rest (step, loss curve so far).

Each checkpoint is a complete directory ``step-NNNNNNNN`` written before ``latest`` is
atomically switched to it, so a SIGKILL at any moment leaves the previous checkpoint usable.
The learning-rate schedule is a pure function of the step and batches are drawn from
(seed, step), so the step number is all the scheduler and data state there is.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text, fsync_dir
from recipelab.trainer.spec import CHECKPOINT_LATEST as LATEST


class CheckpointMismatch(RecipelabError, ValueError):
    """The latest checkpoint was written by a run set up otherwise (sharded or not)."""


@dataclass
class Checkpoint:
    step: int  # the number of optimizer steps already taken
    extra: dict[str, Any]


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], Any]:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, slots in state["state"].items():
        for name, value in slots.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: Any) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    for index, slots in meta["scalars"].items():
        state.setdefault(int(index), {}).update(slots)
    return {"state": state, "param_groups": meta["param_groups"]}


def rng_tensors() -> dict[str, torch.Tensor]:
    rng = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state()
    return rng


def restore_rng(rng: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])


def save(root: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
         extra: dict[str, Any], keep: int = 1) -> None:
    """Write checkpoint ``step`` and point ``latest`` at it; the newest ``keep`` stay."""
    root.mkdir(parents=True, exist_ok=True)
    staging, name = staging_dir(root, step)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    save_model(model, str(staging / "model.safetensors"))
    opt_tensors, opt_meta = _flatten_optimizer(optimizer)
    save_file(opt_tensors, str(staging / "optimizer.safetensors"))
    save_file(rng_tensors(), str(staging / "rng.safetensors"))
    (staging / "state.json").write_text(json.dumps(
        {"step": step, "optimizer": opt_meta, "extra": extra}))
    publish(root, staging, name, keep)


def staging_dir(root: Path, step: int) -> tuple[Path, str]:
    """The hidden directory checkpoint ``step`` is written into, and its final name."""
    name = f"step-{step:08d}"
    return root / f".{name}.partial", name


def publish(root: Path, staging: Path, name: str, keep: int) -> None:
    """Move a completely written ``staging`` to ``name``, point ``latest`` at it, and keep the
    newest ``keep``: a SIGKILL before the pointer moves leaves the previous one in force."""
    fsync_dir(staging)
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    atomic_write_text(root / LATEST, name)
    kept = sorted(p.name for p in root.glob("step-*"))[-max(1, keep):]
    for old in root.glob("step-*"):
        if old.name != name and old.name not in kept:
            shutil.rmtree(old, ignore_errors=True)


def latest_dir(root: Path) -> Path | None:
    """The directory ``latest`` points at; None before the first checkpoint."""
    pointer = root / LATEST
    return root / pointer.read_text().strip() if pointer.exists() else None


def load(root: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> Checkpoint | None:
    """Restore the latest checkpoint into ``model`` and ``optimizer``; None if there is none."""
    directory = latest_dir(root)
    if directory is None:
        return None
    state = json.loads((directory / "state.json").read_text())
    if state.get("sharded"):
        raise CheckpointMismatch(
            f"{directory} holds a sharded run's checkpoint (--sharding full over "
            f"{state['world_size']} processes): resume it with --sharding full")
    load_model(model, str(directory / "model.safetensors"))
    optimizer.load_state_dict(_unflatten_optimizer(
        load_file(str(directory / "optimizer.safetensors")), state["optimizer"]))
    restore_rng(load_file(str(directory / "rng.safetensors")))
    return Checkpoint(step=int(state["step"]), extra=state["extra"])
