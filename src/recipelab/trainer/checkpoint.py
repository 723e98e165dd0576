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

from recipelab.fsutil import atomic_write_text, fsync_dir
from recipelab.trainer.spec import CHECKPOINT_LATEST as LATEST


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


def _rng_tensors() -> dict[str, torch.Tensor]:
    rng = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state()
    return rng


def save(root: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
         extra: dict[str, Any], keep: int = 1) -> None:
    """Write checkpoint ``step`` and point ``latest`` at it; the newest ``keep`` stay."""
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:08d}"
    staging = root / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    save_model(model, str(staging / "model.safetensors"))
    opt_tensors, opt_meta = _flatten_optimizer(optimizer)
    save_file(opt_tensors, str(staging / "optimizer.safetensors"))
    save_file(_rng_tensors(), str(staging / "rng.safetensors"))
    (staging / "state.json").write_text(json.dumps(
        {"step": step, "optimizer": opt_meta, "extra": extra}))
    fsync_dir(staging)
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    atomic_write_text(root / LATEST, name)
    kept = sorted(p.name for p in root.glob("step-*"))[-max(1, keep):]
    for old in root.glob("step-*"):
        if old.name != name and old.name not in kept:
            shutil.rmtree(old, ignore_errors=True)


def load(root: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> Checkpoint | None:
    """Restore the latest checkpoint into ``model`` and ``optimizer``; None if there is none."""
    pointer = root / LATEST
    if not pointer.exists():
        return None
    directory = root / pointer.read_text().strip()
    state = json.loads((directory / "state.json").read_text())
    load_model(model, str(directory / "model.safetensors"))
    optimizer.load_state_dict(_unflatten_optimizer(
        load_file(str(directory / "optimizer.safetensors")), state["optimizer"]))
    rng = load_file(str(directory / "rng.safetensors"))
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])
    return Checkpoint(step=int(state["step"]), extra=state["extra"])
