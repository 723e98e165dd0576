"""The exported recipe as a torchtitan job config, for a user who trains with torchtitan.

``recipe.json`` is what ``recipelab pretrain`` reads. A team that trains with torchtitan
should start from the same numbers, so the export writes ``torchtitan.toml`` beside it, in the
TOML job-config format of torchtitan :data:`RELEASE` (``torchtitan/config/job_config.py``):
learning rate, AdamW betas, epsilon and weight decay, warm-up, schedule and its floor, global
and per-GPU batch, context, clipping, steps, seed, precision and sharding.

torchtitan names a model's shape by a *flavor* registered in its model package, not in the
job config, and some knobs a recipe carries have no field there (per-group learning-rate
multipliers, z-loss, logit soft-capping, initialisation scales). The file's header lists the
ones this recipe sets away from torchtitan's behaviour, so nothing is lost silently.
"""

from __future__ import annotations

import math
from typing import Any

from recipelab.recipe import Optimizer, Recipe, Stability
from recipelab.transfer.micro_batch import BatchSplit

RELEASE = "v0.2.2"
FILE = "torchtitan.toml"
DECAY_TYPE = {"cosine": "cosine", "linear": "linear", "wsd": "linear"}
"""torchtitan's ``decay_type`` for each schedule kind; WSD is linear decay over the last
``decay_ratio`` of the run."""


def job_config(recipe: Recipe, split: BatchSplit, description: str) -> dict[str, dict[str, Any]]:
    """The job config's tables for ``recipe`` trained as ``split`` says."""
    schedule, optimizer = recipe.schedule, recipe.optimizer
    scheduler: dict[str, Any] = {"warmup_steps": schedule.warmup_steps,
                                 "decay_type": DECAY_TYPE[schedule.kind],
                                 "min_lr_factor": schedule.min_lr_ratio}
    if schedule.kind == "wsd":
        scheduler["decay_ratio"] = schedule.decay_fraction
    sharded = split.sharding == "full" and split.gpus > 1
    return {
        "job": {"description": description, "dump_folder": "./outputs"},
        "model": {"name": "llama3", "flavor": "RECIPELAB",
                  "hf_assets_path": "./assets/hf/TOKENIZER",
                  "converters": ["float8"] if recipe.precision == "fp8" else []},
        "optimizer": {"name": "AdamW", "lr": optimizer.lr, "beta1": optimizer.beta1,
                      "beta2": optimizer.beta2, "eps": optimizer.eps,
                      "weight_decay": optimizer.weight_decay, "implementation": "fused"},
        "lr_scheduler": scheduler,
        "training": {"local_batch_size": split.per_gpu,
                     "global_batch_size": recipe.batch_size * recipe.grad_accum,
                     "seq_len": recipe.seq_len,
                     "max_norm": optimizer.grad_clip if optimizer.grad_clip > 0 else math.inf,
                     "steps": recipe.steps,
                     "mixed_precision_param": "float32" if recipe.precision == "fp32" else "bfloat16",
                     "mixed_precision_reduce": "float32",
                     "dataset": "DATASET"},
        "parallelism": {"data_parallel_replicate_degree": 1 if sharded else split.gpus,
                        "data_parallel_shard_degree": split.gpus if sharded else 1},
        "activation_checkpoint": {"mode": "none"},
        "checkpoint": {"enable": True, "folder": "checkpoint", "interval": 500},
        "debug": {"seed": recipe.seed},
    }


def unexpressed(recipe: Recipe) -> list[str]:
    """The recipe's knobs that torchtitan's job config cannot hold, where they differ from
    what torchtitan does anyway (one learning rate, every parameter decayed alike, no extra
    loss terms)."""
    found = [f"model shape: {recipe.shape.n_layer} layers, d_model {recipe.shape.d_model}, "
             f"{recipe.shape.n_head} heads ({recipe.shape.n_kv_head} key/value), FFN "
             f"{recipe.shape.ffn_hidden} ({recipe.shape.activation}), vocabulary "
             f"{recipe.shape.vocab_size}: register it as the llama3 flavor 'RECIPELAB'"]
    plain_optimizer, plain_stability = Optimizer(), Stability()
    for name in ("lr_embed_mult", "lr_output_mult", "lr_hidden_mult", "decay_embeddings",
                 "decay_norms"):
        value = getattr(recipe.optimizer, name)
        if value != getattr(plain_optimizer, name):
            found.append(f"optimizer.{name} = {value}")
    for name, value in recipe.stability.model_dump().items():
        if value != getattr(plain_stability, name):
            found.append(f"stability.{name} = {value}")
    return found


def render(config: dict[str, dict[str, Any]], notes: list[str]) -> str:
    """The tables as TOML, ``notes`` as comments at the top."""
    lines = [f"# torchtitan {RELEASE} job config written by 'recipelab export'.",
             "# Replace DATASET and TOKENIZER with yours. torchtitan cannot hold these; "
             "set them in code:"]
    lines += [f"#   - {note}" for note in notes]
    for table, values in config.items():
        lines += ["", f"[{table}]"]
        lines += [f"{key} = {_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
