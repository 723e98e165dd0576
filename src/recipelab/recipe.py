"""The Recipe: every knob of one training run, plus target presets and proxy derivation.

A recipe is the unit everything else talks about: the proposer edits one, the guardrails
judge one, the trainer runs one and the trajectory records one. It is a pydantic model with
``extra="forbid"`` so a misspelt knob in a recipe file, or in an LLM's reply, is an error
rather than a silently ignored default.

Targets are the architectures a user will train in the cloud; proxies are the small models
trained here. :func:`derive_proxy` shrinks a target to a parameter budget while keeping what
makes a small run predictive of the big one: head dimension, FFN ratio, activation, norm,
position encoding and GQA ratio, with depth and width as close to the target's aspect ratio
as the budget allows.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from recipelab.errors import RecipelabError

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


# --- targets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """An architecture a user means to train in the cloud."""

    name: str
    description: str
    shape: Shape
    context: int

    @property
    def params(self) -> int:
        return param_count(self.shape, self.context)


def llama2_7b() -> Target:
    shape = Shape(n_layer=32, d_model=4096, n_head=32, n_kv_head=32, head_dim=128,
                  ffn_ratio=11008 / 4096, vocab_size=32000)
    return Target("llama2-7b", "Llama-2-7B shape: MHA, SwiGLU, RMSNorm, RoPE", shape, 4096)


def llama3_70b() -> Target:
    shape = Shape(n_layer=80, d_model=8192, n_head=64, n_kv_head=8, head_dim=128,
                  ffn_ratio=28672 / 8192, vocab_size=128256)
    return Target("llama3-70b", "Llama-3-70B shape: GQA 8:1, SwiGLU, RMSNorm, RoPE", shape, 8192)


def llama32_1b() -> Target:
    shape = Shape(n_layer=16, d_model=2048, n_head=32, n_kv_head=8, head_dim=64,
                  ffn_ratio=8192 / 2048, vocab_size=128256, tie_embeddings=True)
    return Target("llama3.2-1b", "Llama-3.2-1B shape: GQA 4:1, tied embeddings", shape, 8192)


def smollm2_135m() -> Target:
    shape = Shape(n_layer=30, d_model=576, n_head=9, n_kv_head=3, head_dim=64,
                  ffn_ratio=1536 / 576, vocab_size=49152, tie_embeddings=True)
    return Target("smollm2-135m", "SmolLM2-135M shape: GQA 3:1, tied embeddings", shape, 8192)


def toy() -> Target:
    shape = Shape(n_layer=8, d_model=256, n_head=8, n_kv_head=4, head_dim=32,
                  ffn_ratio=8 / 3, vocab_size=BYTE_VOCAB, tie_embeddings=True)
    return Target("toy", "a 7M Llama-shaped model for exercising recipelab itself", shape, 1024)


TARGETS: dict[str, Callable[[], Target]] = {
    t().name: t for t in (llama2_7b, llama3_70b, llama32_1b, smollm2_135m, toy)
}


def get_target(name: str) -> Target:
    """A built-in target by name, or the target described in the file at path ``name``.

    Accepting a path here, where every caller already resolves a target, lets ``--target
    FILE`` work wherever ``--target NAME`` does, with the path saved in campaign settings.
    """
    if name in TARGETS:
        return TARGETS[name]()
    path = Path(name)
    if path.suffix == ".json" or path.is_file():
        return load_target_file(path)
    raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}, or give "
                     "the path of a target file (a Hugging Face config.json or a recipelab "
                     "target JSON)")


HF_ACTIVATIONS: dict[str, Activation] = {"silu": "swiglu", "swish": "swiglu"}
"""Llama-family MLPs are gated; a gated SiLU MLP is what recipelab calls SwiGLU."""

HF_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
               "vocab_size")


class TargetFileError(RecipelabError, ValueError):
    """A target file that cannot be read as a target; the message names the file and the fix."""


def load_target_file(path: Path) -> Target:
    """The target described in ``path``: a Llama-family Hugging Face ``config.json`` (as
    published with open models) or a recipelab target JSON
    (``{"name", "description", "context", "shape": {<Shape fields>}}``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TargetFileError(f"target file {path} does not exist; give the path of a "
                              "config.json or a recipelab target JSON, or a built-in target "
                              f"({', '.join(TARGETS)})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TargetFileError(f"target file {path} is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TargetFileError(f"target file {path} holds a JSON {type(data).__name__}, "
                              "not an object")
    try:
        if "shape" in data:
            return _native_target(data, path)
        return _hf_target(data, path)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, TargetFileError):
            raise
        raise TargetFileError(f"target file {path}: {exc}") from None


def _native_target(data: dict[str, Any], path: Path) -> Target:
    unknown = sorted(set(data) - {"name", "description", "context", "shape"})
    if unknown:
        raise TargetFileError(f"target file {path}: unknown key(s) {', '.join(unknown)}; a "
                              "recipelab target has name, description, context and shape")
    shape = Shape.model_validate(data["shape"])
    context = int(data.get("context", 4096))
    return Target(str(data.get("name", path.stem)),
                  str(data.get("description", f"target described in {path.name}")),
                  shape, context)


def _hf_target(data: dict[str, Any], path: Path) -> Target:
    missing = [key for key in HF_REQUIRED if key not in data]
    if missing:
        raise TargetFileError(
            f"target file {path} is neither a recipelab target (no 'shape') nor a Llama-family "
            f"config.json: it lacks {', '.join(missing)}")
    act = str(data.get("hidden_act", "silu"))
    if act not in HF_ACTIVATIONS:
        raise TargetFileError(
            f"target file {path}: hidden_act {act!r} is not a Llama-family gated SiLU MLP; "
            "recipelab reads only silu, or describe the target in a recipelab target JSON")
    n_head = int(data["num_attention_heads"])
    d_model = int(data["hidden_size"])
    head_dim = int(data.get("head_dim") or d_model // n_head)
    norm: Norm = "layernorm" if "layer_norm_eps" in data and "rms_norm_eps" not in data \
        else "rmsnorm"
    shape = Shape(
        n_layer=int(data["num_hidden_layers"]), d_model=d_model, n_head=n_head,
        n_kv_head=int(data.get("num_key_value_heads") or n_head), head_dim=head_dim,
        ffn_ratio=int(data["intermediate_size"]) / d_model, activation=HF_ACTIVATIONS[act],
        norm=norm, position="rope", vocab_size=int(data["vocab_size"]),
        tie_embeddings=bool(data.get("tie_word_embeddings", False)),
        rope_base=float(data.get("rope_theta", 10_000.0)),
    )
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    kind = str(data.get("model_type", "llama"))
    description = (f"{name} ({kind} config.json): {shape.n_layer} layers, d_model "
                   f"{shape.d_model}, GQA {shape.gqa_ratio}:1, RoPE base {shape.rope_base:g}")
    return Target(name, description, shape, int(data.get("max_position_embeddings", 4096)))


# --- proxies -----------------------------------------------------------------------------

MIN_PROXY_LAYERS = 2


class ProxyBudgetError(RecipelabError, ValueError):
    """The budget cannot hold even the smallest shape-faithful proxy of the target."""


def _proxy_shape(target: Shape, n_head: int, n_layer: int, vocab_size: int) -> Shape:
    ratio = target.gqa_ratio
    return target.model_copy(update={
        "n_layer": n_layer,
        "n_head": n_head,
        "n_kv_head": n_head // ratio,
        "d_model": n_head * target.head_dim * target.d_model // target.attn_width,
        "vocab_size": vocab_size,
    })


def derive_proxy(target: Target, budget: int, *, vocab_size: int = BYTE_VOCAB,
                 seq_len: int = 128) -> Shape:
    """The shape-faithful proxy of ``target`` that fits ``budget`` parameters.

    Width moves in steps of one GQA group of heads (so head_dim and the GQA ratio stay
    exact); for each width the deepest model within budget is taken, and the width whose
    depth/width ratio is closest to the target's (in log space) wins.
    """
    shape = target.shape
    aspect = shape.d_model / shape.n_layer
    best: tuple[float, int, Shape] | None = None
    for n_head in range(shape.gqa_ratio, shape.n_head + 1, shape.gqa_ratio):
        layers = 0
        while layers < shape.n_layer:
            trial = _proxy_shape(shape, n_head, layers + 1, vocab_size)
            if param_count(trial, seq_len) > budget:
                break
            layers += 1
        if layers < min(MIN_PROXY_LAYERS, shape.n_layer):
            continue
        candidate = _proxy_shape(shape, n_head, layers, vocab_size)
        distance = abs(math.log(candidate.d_model / layers / aspect))
        score = (distance, -param_count(candidate, seq_len))
        if best is None or score < best[:2]:
            best = (*score, candidate)
    if best is None:
        smallest = _proxy_shape(shape, shape.gqa_ratio, min(MIN_PROXY_LAYERS, shape.n_layer),
                                vocab_size)
        raise ProxyBudgetError(
            f"a budget of {budget:,} parameters cannot hold a proxy of {target.name} that keeps "
            f"head_dim {shape.head_dim} and GQA ratio {shape.gqa_ratio}: the smallest has "
            f"{param_count(smallest, seq_len):,}. Raise the budget (--budget) or pick a larger "
            "proxy preset."
        )
    return best[2]


@dataclass(frozen=True)
class ProxyPreset:
    """What one kind of hardware trains per trial: a parameter budget and a batch geometry."""

    name: str
    budget: int
    default_target: str
    batch_size: int
    seq_len: int
    steps: int
    eval_bytes: int
    lr: float
    warmup_steps: int
    precision: Precision = "fp32"


PROXY_PRESETS: dict[str, ProxyPreset] = {
    p.name: p
    for p in (
        ProxyPreset("tiny", 120_000, "toy", batch_size=8, seq_len=64, steps=20,
                    eval_bytes=65_536, lr=1e-2, warmup_steps=2),
        ProxyPreset("cpu", 1_000_000, "smollm2-135m", batch_size=16, seq_len=256, steps=60,
                    eval_bytes=65_536, lr=3e-3, warmup_steps=6),
        ProxyPreset("spark", 200_000_000, "llama2-7b", batch_size=16, seq_len=1024, steps=60,
                    eval_bytes=65_536, lr=1e-3, warmup_steps=6, precision="bf16"),
    )
}


def preset_spec(preset: str) -> ProxyPreset:
    """The preset called ``preset``, or a ValueError naming the presets there are."""
    try:
        return PROXY_PRESETS[preset]
    except KeyError:
        raise ValueError(
            f"unknown proxy preset {preset!r}; choose one of {', '.join(PROXY_PRESETS)}"
        ) from None


def target_name(preset: str, target: str | None = None) -> str:
    """The target a campaign of ``preset`` stands for: ``target`` when given, else the
    preset's default. The one place that default is read (a test keeps it so)."""
    return target or preset_spec(preset).default_target


def preset_target(preset: str, target: str | None = None) -> Target:
    """The :class:`Target` of :func:`target_name`."""
    return get_target(target_name(preset, target))


def param_budget(preset: str, budget: int | None = None) -> int:
    """The proxy's parameter budget: ``budget`` when given, else the preset's."""
    return budget or preset_spec(preset).budget


def proxy_recipe(preset: str = "cpu", target: str | None = None,
                 budget: int | None = None) -> Recipe:
    """The baseline recipe a preset trains for a target: the unedited proxy of a campaign."""
    spec = preset_spec(preset)
    shape = derive_proxy(preset_target(preset, target), param_budget(preset, budget),
                         seq_len=spec.seq_len)
    return Recipe(
        shape=shape,
        optimizer=Optimizer(lr=spec.lr),
        schedule=Schedule(warmup_steps=spec.warmup_steps),
        batch_size=spec.batch_size,
        seq_len=spec.seq_len,
        precision=spec.precision,
        steps=spec.steps,
        eval_bytes=spec.eval_bytes,
    )
