"""Fully sharded data parallel for the long run: FSDP2 per transformer block, DCP checkpoints.

DDP keeps the whole model and its AdamW states on every GPU, 16 bytes a parameter, so a 7B
model needs about 100 GiB a GPU however many GPUs there are. PyTorch's FSDP2
(``torch.distributed.fsdp.fully_shard``, as torchtitan applies it) keeps ``1/world`` of the
weights, gradients and optimizer states on each rank and gathers one block's weights only
while that block runs. :func:`shard_model` makes each transformer block a unit and the model
itself the root (embeddings, output layer, final norm), with bf16 parameters and fp32
gradient reduction where the recipe trains in bf16.

A sharded model's state exists only in pieces, so its checkpoints are written by every rank
with ``torch.distributed.checkpoint`` (:func:`save`, :func:`load`) into the same staging
directory and published by rank 0 as an unsharded checkpoint is (``latest`` moves last).
DCP reshards on load, so a resume on another world size restores the same model and
optimizer; only the per-rank RNG state is then not carried over.

:func:`resolve` decides ``--sharding auto`` by the memory model of
:mod:`recipelab.transfer.micro_batch`, the same one ``recipelab export`` chose by.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from recipelab.errors import RecipelabError
from recipelab.guardrails.base import gib
from recipelab.longrun.distributed import Collectives, World
from recipelab.recipe import Recipe
from recipelab.trainer import checkpoint
from recipelab.trainer.checkpoint import Checkpoint, CheckpointMismatch
from recipelab.transfer.micro_batch import MEMORY_MARGIN, ShardingChoice, per_gpu_peak

SHARDS = "shards"  # the DCP directory inside a checkpoint


class ShardingError(RecipelabError, ValueError):
    """A sharded run that cannot be set up as asked."""


def refuse(choice: ShardingChoice, recipe: Recipe, world: World) -> None:
    """:class:`ShardingError` for a ``--sharding full`` that cannot run, before anything is
    built or written."""
    if choice != "full":
        return
    if world.size == 1:
        raise ShardingError("--sharding full needs at least 2 processes to shard over: "
                            "launch with torchrun --nproc-per-node N, or use --sharding auto")
    if recipe.precision == "fp8":
        raise ShardingError("--sharding full with fp8 is not supported: TransformerEngine's "
                            "fp8 layers keep their own scaling state; train fp8 with DDP "
                            "(--sharding none) or set precision bf16")


def resolve(choice: ShardingChoice, recipe: Recipe, world: World,
            device: torch.device) -> tuple[bool, str]:
    """Whether this run shards, and why (for the ``pretrain_start`` event)."""
    refuse(choice, recipe, world)
    if choice == "none":
        return False, "--sharding none"
    if world.size == 1:
        return False, "one process: nothing to shard over"
    if recipe.precision == "fp8":
        return False, "fp8 trains with DDP"
    if choice == "full":
        return True, "--sharding full"
    if device.type != "cuda":
        return False, "auto on CPU: a whole copy per process fits host memory"
    memory = torch.cuda.get_device_properties(device).total_memory
    rows = recipe.batch_size // world.size
    whole = per_gpu_peak(recipe, rows, world.size, "cuda").total
    budget = int(memory * (1.0 - MEMORY_MARGIN))
    if whole <= budget:
        return False, f"a whole copy per GPU fits: {gib(whole)} of {gib(budget)} usable"
    return True, f"a whole copy per GPU needs {gib(whole)}, more than {gib(budget)} usable"


def shard_model(model: nn.Module, precision: str) -> None:
    """Make every transformer block of ``model`` an FSDP2 unit and ``model`` the root, in
    place; build the optimizer after this, over the sharded parameters."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if precision == "bf16" else MixedPrecisionPolicy())
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ShardingError(f"{type(model).__name__} has no blocks to shard")
    for block in blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) value made whole on every rank; any other tensor as it is."""
    whole = getattr(value, "full_tensor", None)
    return whole() if callable(whole) else value


def local_square_sum(model: nn.Module) -> torch.Tensor:
    """The sum of squares of this rank's share of every parameter (all of them unsharded)."""
    total = torch.zeros((), dtype=torch.float64)
    for param in model.parameters():
        local = getattr(param, "to_local", None)
        piece = local() if callable(local) else param
        total += piece.detach().double().pow(2).sum().cpu()
    return total


def save(root: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
         extra: dict[str, object], keep: int, comm: Collectives) -> None:
    """Every rank writes its shards of checkpoint ``step``; rank 0 publishes it."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save as save_shards

    staging, name = checkpoint.staging_dir(root, step)
    if comm.world.main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    comm.barrier()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    save_shards({"model": model_state, "optimizer": optimizer_state},
                checkpoint_id=str(staging / SHARDS))
    save_file(checkpoint.rng_tensors(), str(staging / f"rng-{comm.world.rank}.safetensors"))
    comm.barrier()
    if comm.world.main:
        (staging / "state.json").write_text(json.dumps(
            {"step": step, "extra": extra, "sharded": True, "world_size": comm.world.size}))
        checkpoint.publish(root, staging, name, keep)
    comm.barrier()


def load(root: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
         world: World) -> Checkpoint | None:
    """Restore the latest sharded checkpoint into the sharded ``model`` and ``optimizer`` on
    every rank (resharded by DCP where the world size changed); None if there is none."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as load_shards

    directory = checkpoint.latest_dir(root)
    if directory is None:
        return None
    state = json.loads((directory / "state.json").read_text())
    if not state.get("sharded"):
        raise CheckpointMismatch(f"{directory} holds an unsharded run's checkpoint: resume it "
                                 "with --sharding none")
    model_state, optimizer_state = get_state_dict(model, optimizer)
    load_shards({"model": model_state, "optimizer": optimizer_state},
                checkpoint_id=str(directory / SHARDS))  # in place, into this rank's shards
    set_state_dict(model, optimizer, model_state_dict=model_state,
                   optim_state_dict=optimizer_state)
    rng = directory / f"rng-{world.rank}.safetensors"
    if state["world_size"] == world.size and rng.exists():
        checkpoint.restore_rng(load_file(str(rng)))
    return Checkpoint(step=int(state["step"]), extra=state["extra"])


def whole_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded model's state on rank 0's CPU (every rank must call it: it gathers)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))
    return {name: value for name, value in state.items() if isinstance(value, torch.Tensor)}
