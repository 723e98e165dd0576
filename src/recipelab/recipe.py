"""The Recipe: every knob of one training run, and the arithmetic of its parameters and FLOPs
(targets and the proxies derived from them: :mod:`recipelab.targets`).

A recipe is the unit everything else talks about: the proposer edits one, the guardrails
judge one, the trainer runs one and the trajectory records one. It is a pydantic model with
``extra="forbid"`` so a misspelt knob in a recipe file, or in an LLM's reply, is an error
rather than a silently ignored default.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Activation = Literal["swiglu", "gelu", "gelu_exact", "relu2"]
"""``gelu`` is the tanh form (GPT-2's); ``gelu_exact`` is the erf form (BERT's, Hugging Face's
``gelu``): two activations, since a target trained with one is not predicted by the other."""
Norm = Literal["rmsnorm", "layernorm"]
Position = Literal["rope", "learned"]
ScheduleKind = Literal["cosine", "linear", "wsd"]
Precision = Literal["fp32", "bf16", "fp8"]
TokenizerKind = Literal["byte", "bpe"]

BYTE_VOCAB = 256

BASELINE_PROPOSER = "baseline"
"""The proposer name of a campaign's baseline trials: the preset's recipe unedited, trained
first (with several seeds, which measure the noise floor) as what every edit is judged
against. Here, below the proposer, the trajectory and the agent, so all three read one name."""

PERSON_PROPOSER = "person"
"""The proposer name of a person's own ``--edit`` edits: search trials, but not the
proposer's, so they count in neither its share nor the LLM's."""

LLM_PROPOSER_PREFIX = "llm:"
"""An LLM's proposals carry ``llm:MODEL`` as their proposer (read by the ledger's LLM share)."""

FALLBACK_ARTIFACT = "fallback.txt"
"""The artifact of an LLM turn the sampler took instead, saying why."""

FP8_WIDTH_MULTIPLE = 16
"""TransformerEngine runs a GEMM in FP8 only when the last dimension of each operand is
divisible by 16 (``assert_dim_for_fp8_exec`` in the forward pass; cuBLASLt's leading-dimension
rule, which the backward pass's transposed GEMMs also meet), so every ``te.Linear`` needs
in_features and out_features divisible by 16."""

FP8_TOKEN_MULTIPLE = 16
"""Tokens per FP8 GEMM: TransformerEngine's forward check needs the product of the input's
leading dimensions divisible by 8, and the weight-gradient GEMM, which reduces over the
tokens, needs them divisible by 16. Training micro-batches and evaluation batches keep to 16."""


class StrictModel(BaseModel):
    """Base for every config: unknown keys and wrong types are errors, instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Shape(StrictModel):
    """The architecture of one model. ``d_model`` need not equal ``n_head * head_dim``."""

    n_layer: int = Field(ge=1, le=256)
    d_model: int = Field(ge=8, le=65536)
    n_head: int = Field(ge=1, le=512)
    n_kv_head: int = Field(ge=1, le=512)
    head_dim: int = Field(ge=4, le=1024)
    ffn_ratio: float = Field(gt=0.0, le=16.0)
    activation: Activation = "swiglu"
    norm: Norm = "rmsnorm"
    position: Position = "rope"
    qk_norm: bool = False
    tie_embeddings: bool = False
    vocab_size: int = Field(default=BYTE_VOCAB, ge=2, le=1_048_576)
    rope_base: float = Field(default=10_000.0, ge=100.0, le=1e9)

    @model_validator(mode="after")
    def _consistent(self) -> Shape:
        if self.n_head % self.n_kv_head:
            raise ValueError(
                f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.n_kv_head}) "
                "for grouped-query attention; pick n_kv_head among the divisors of n_head"
            )
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE rotates pairs of channels, so head_dim ({self.head_dim}) must be even")
        return self

    @property
    def gqa_ratio(self) -> int:
        """Query heads per key/value head (1 is plain multi-head attention)."""
        return self.n_head // self.n_kv_head

    @property
    def attn_width(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_head * self.head_dim

    @property
    def ffn_hidden(self) -> int:
        """The FFN's hidden width: ``ffn_ratio × d_model`` to the nearest multiple of 16.

        Rounded like Llama's ``multiple_of``, and in every precision, so that TransformerEngine's
        FP8 GEMMs (:data:`FP8_WIDTH_MULTIPLE`) can run any proxy and changing the precision
        never changes the model. ``ffn_ratio`` itself stays the target's exactly; the width
        is within 8 of ``ffn_ratio × d_model`` (ties round up).
        """
        units = math.floor(self.ffn_ratio * self.d_model / FP8_WIDTH_MULTIPLE + 0.5)
        return FP8_WIDTH_MULTIPLE * max(1, units)

    def linear_layers(self) -> tuple[LinearLayer, ...]:
        """The projections of one block, which the trainer builds through its linear factory
        (``te.Linear`` under fp8); embeddings, norms and the output head are never FP8 GEMMs."""
        up = 2 * self.ffn_hidden if self.activation == "swiglu" else self.ffn_hidden
        return (
            LinearLayer("attn.qkv", self.d_model, self.attn_width + 2 * self.kv_width),
            LinearLayer("attn.out", self.attn_width, self.d_model),
            LinearLayer("ffn.up", self.d_model, up),
            LinearLayer("ffn.down", self.ffn_hidden, self.d_model),
        )


@dataclass(frozen=True)
class LinearLayer:
    """One projection of a transformer block, named as in :mod:`recipelab.trainer.model`."""

    name: str
    in_features: int
    out_features: int


class Optimizer(StrictModel):
    """AdamW. ``grad_clip`` of 0 turns clipping off.

    Parameters fall into four groups, each with its own learning-rate multiplier and weight
    decay rule: embeddings (token and learned-position tables; with tied embeddings also the
    output layer, which is the same tensor), the output layer, hidden matrices (every
    projection inside the blocks) and norms. The defaults are the one-group AdamW recipelab
    always trained: every matrix decayed, norms not, one learning rate.
    """

    lr: float = Field(default=3e-3, gt=0.0, le=1.0)
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0)
    beta2: float = Field(default=0.95, ge=0.0, lt=1.0)
    eps: float = Field(default=1e-8, gt=0.0, le=1e-2)
    weight_decay: float = Field(default=0.1, ge=0.0, le=1.0)
    grad_clip: float = Field(default=1.0, ge=0.0, le=1000.0)
    lr_embed_mult: float = Field(default=1.0, gt=0.0, le=100.0)
    lr_output_mult: float = Field(default=1.0, gt=0.0, le=100.0)
    lr_hidden_mult: float = Field(default=1.0, gt=0.0, le=100.0)
    decay_embeddings: bool = True
    decay_norms: bool = False


OLD_SCHEDULE_NAMES = {"constant-cooldown": "wsd"}
"""Schedule kinds recipes were once written with, and the kind each is now called."""

OLD_SCHEDULE_FIELDS = {"cooldown_fraction": "decay_fraction"}
"""Schedule fields recipes were once written with, and the field each is now called."""


class Schedule(StrictModel):
    """Learning-rate schedule: linear warmup, then decay to ``min_lr_ratio * lr``.

    ``wsd`` (warmup-stable-decay) holds the peak rate and decays linearly over the last
    ``decay_fraction`` of the run; ``decay_fraction`` means nothing under the other kinds.
    Recipes written before WSD had its name call it ``constant-cooldown`` with a
    ``cooldown_fraction``; both are read as ``wsd`` and ``decay_fraction`` (the same
    schedule), so old trajectories and recipe files still load.
    """

    kind: ScheduleKind = "cosine"
    warmup_steps: int = Field(default=10, ge=0, le=10_000_000)
    min_lr_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    decay_fraction: float = Field(default=0.2, gt=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for old, new in OLD_SCHEDULE_FIELDS.items():
            if old in data:
                value = data.pop(old)
                if new in data and data[new] != value:
                    raise ValueError(f"schedule gives both {old} ({value}) and {new} "
                                     f"({data[new]}); {old} is the old name of {new}, keep only {new}")
                data[new] = value
        kind = data.get("kind")
        if isinstance(kind, str) and kind in OLD_SCHEDULE_NAMES:
            data["kind"] = OLD_SCHEDULE_NAMES[kind]
        return data

    def lr_multiplier(self, step: int, total_steps: int) -> float:
        """The factor applied to the peak learning rate at ``step`` (0-based); the last step
        of the run, ``total_steps - 1``, trains at exactly ``min_lr_ratio``."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.kind == "wsd":
            cooldown_start = total_steps - max(1, round(self.decay_fraction * total_steps))
            if step < cooldown_start:
                return 1.0
            progress = (step - cooldown_start) / max(1, total_steps - 1 - cooldown_start)
        else:
            progress = (step - self.warmup_steps) / max(1, total_steps - 1 - self.warmup_steps)
        progress = min(max(progress, 0.0), 1.0)
        decay = 0.5 * (1.0 + math.cos(math.pi * progress)) if self.kind == "cosine" else 1.0 - progress
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * decay


class Stability(StrictModel):
    """Knobs that keep a run from spiking or diverging; the defaults change nothing.

    ``z_loss`` adds ``z_loss × mean(logsumexp(logits)²)`` to the training loss (PaLM), so the
    softmax normaliser stays near zero. ``logit_softcap`` of c > 0 maps logits through
    ``c·tanh(logits/c)`` (Gemma 2), in training and evaluation alike, since it is part of
    the model; 0 turns it off. ``init_std`` is the standard deviation of every matrix at
    initialisation (embeddings and the blocks' projections); ``output_init_std`` that of an
    untied output layer; ``depth_scaled_init`` divides the residual projections' (attention
    output, FFN down) by ``sqrt(2 × n_layer)`` (GPT-2).
    """

    z_loss: float = Field(default=0.0, ge=0.0, le=0.1)
    logit_softcap: float = Field(default=0.0, ge=0.0, le=1000.0)
    init_std: float = Field(default=0.02, gt=0.0, le=1.0)
    output_init_std: float = Field(default=0.02, gt=0.0, le=1.0)
    depth_scaled_init: bool = True


class Recipe(StrictModel):
    """Every knob of one training run.

    A recipe dict written before a knob existed (an old trajectory record, a recipe file)
    still loads: every knob added since has a default that trains exactly as before.
    """

    shape: Shape
    optimizer: Optimizer = Optimizer()
    schedule: Schedule = Schedule()
    stability: Stability = Stability()
    batch_size: int = Field(default=16, ge=1, le=65536)
    seq_len: int = Field(default=128, ge=4, le=1_048_576)
    grad_accum: int = Field(default=1, ge=1, le=4096)
    precision: Precision = "fp32"
    tokenizer: TokenizerKind = "byte"
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    steps: int = Field(default=60, ge=1, le=100_000_000)
    eval_bytes: int = Field(default=32_768, ge=256, le=2**31 - 1)

    @model_validator(mode="after")
    def _tokenizer_fits_vocab(self) -> Recipe:
        if self.tokenizer == "byte" and self.shape.vocab_size < BYTE_VOCAB:
            raise ValueError(
                f"the byte tokenizer needs vocab_size >= {BYTE_VOCAB}, got {self.shape.vocab_size}"
            )
        return self

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len * self.grad_accum

    @property
    def tokens(self) -> int:
        """The training tokens of the whole run: ``steps × tokens_per_step``."""
        return self.steps * self.tokens_per_step

    def at_tokens(self, tokens: int) -> Recipe:
        """This recipe trained for ``tokens`` tokens: as many of its own steps as its tokens
        per step allow (at least one). A rung's budget is tokens, so a batch edit trades steps
        for batch as a cloud run with a token budget does. The warm-up stays in steps, and
        so in tokens; the schedule's decay follows the new steps."""
        return self.apply({"steps": max(1, round(tokens / self.tokens_per_step))})

    def param_count(self) -> int:
        return param_count(self.shape, self.seq_len)

    def flops_per_token(self) -> int:
        return training_flops_per_token(self.shape, self.seq_len)

    def knobs(self) -> dict[str, Any]:
        """The recipe flattened to dotted knob names, e.g. ``{"optimizer.lr": 0.003, ...}``."""
        return flatten(self.model_dump())

    def apply(self, edit: Mapping[str, Any]) -> Recipe:
        """A new recipe with the dotted knobs in ``edit`` changed (validated as a whole)."""
        unknown = sorted(set(edit) - set(self.knobs()))
        if unknown:
            raise ValueError(
                f"unknown knob(s) {', '.join(unknown)}; known knobs are {', '.join(sorted(self.knobs()))}"
            )
        data = self.model_dump()
        for key, value in edit.items():
            *parents, leaf = key.split(".")
            node = data
            for part in parents:
                node = node[part]
            node[leaf] = value
        return Recipe.model_validate(data)

    def edit_from(self, parent: Recipe) -> dict[str, Any]:
        """The knobs whose values differ from ``parent``'s."""
        mine, theirs = self.knobs(), parent.knobs()
        return {k: v for k, v in mine.items() if theirs.get(k) != v}

    def fingerprint(self) -> str:
        """A stable hash of every knob: equal fingerprints mean the same training run."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def added_knobs() -> dict[str, Any]:
    """Knobs recipes gained after trajectories were first recorded, with the defaults that
    train as those recipes did: what an older record that lacks them means."""
    optimizer = Optimizer()
    return {
        **{f"optimizer.{name}": getattr(optimizer, name)
           for name in ("lr_embed_mult", "lr_output_mult", "lr_hidden_mult",
                        "decay_embeddings", "decay_norms")},
        **{f"stability.{name}": value for name, value in Stability().model_dump().items()},
        "shape.rope_base": Shape.model_fields["rope_base"].default,
        "schedule.decay_fraction": Schedule().decay_fraction,
    }


def upgrade_knobs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Flattened knobs as recorded by an older recipelab, under today's names (the old WSD
    schedule name and its fraction) and with the knobs added since at their neutral
    defaults, so earlier trials still place in today's space."""
    upgraded = {f"schedule.{OLD_SCHEDULE_FIELDS[name.removeprefix('schedule.')]}"
                if name.removeprefix("schedule.") in OLD_SCHEDULE_FIELDS
                and name.startswith("schedule.") else name: value
                for name, value in knobs.items()}
    kind = upgraded.get("schedule.kind")
    if isinstance(kind, str) and kind in OLD_SCHEDULE_NAMES:
        upgraded["schedule.kind"] = OLD_SCHEDULE_NAMES[kind]
    return {**added_knobs(), **upgraded}


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


# --- parameter and FLOP arithmetic -------------------------------------------------------


def _norm_params(norm: Norm, width: int) -> int:
    return 2 * width if norm == "layernorm" else width


def layer_param_count(shape: Shape) -> int:
    """Parameters of one transformer block (attention, FFN and their norms; no biases)."""
    attn = shape.d_model * (shape.attn_width + 2 * shape.kv_width) + shape.attn_width * shape.d_model
    ffn_mats = 3 if shape.activation == "swiglu" else 2
    ffn = ffn_mats * shape.d_model * shape.ffn_hidden
    norms = 2 * _norm_params(shape.norm, shape.d_model)
    if shape.qk_norm:
        norms += 2 * _norm_params(shape.norm, shape.head_dim)
    return attn + ffn + norms


def non_embedding_params(shape: Shape) -> int:
    """``N`` as scaling laws count it: the transformer blocks, without the token and position
    tables, the final norm or the output head."""
    return shape.n_layer * layer_param_count(shape)


def param_count(shape: Shape, seq_len: int) -> int:
    """Exact parameter count of :class:`recipelab.trainer.model.GPT` built from ``shape``."""
    embeddings = shape.vocab_size * shape.d_model
    positions = seq_len * shape.d_model if shape.position == "learned" else 0
    head = 0 if shape.tie_embeddings else shape.vocab_size * shape.d_model
    final_norm = _norm_params(shape.norm, shape.d_model)
    return embeddings + positions + shape.n_layer * layer_param_count(shape) + final_norm + head


def training_flops_per_token(shape: Shape, seq_len: int) -> int:
    """Training FLOPs per token: 6 per matmul weight plus attention (PaLM's 6N + 12·L·H·Q·T)."""
    ffn_mats = 3 if shape.activation == "swiglu" else 2
    matmul_weights = shape.n_layer * (
        shape.d_model * (2 * shape.attn_width + 2 * shape.kv_width)
        + ffn_mats * shape.d_model * shape.ffn_hidden
    ) + shape.vocab_size * shape.d_model
    attention = 12 * shape.n_layer * shape.attn_width * seq_len
    return 6 * matmul_weights + attention
