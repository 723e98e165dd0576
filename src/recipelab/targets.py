"""Targets and their proxies.

Targets are the architectures a user will train in the cloud; proxies are the small models
trained here. :func:`derive_proxy` shrinks a target to a parameter budget while keeping what
makes a small run predictive of the big one: head dimension, FFN ratio, activation, norm,
position encoding and GQA ratio, with depth and width as close to the target's aspect ratio
as the budget allows. A preset names a target and a budget; :func:`proxy_recipe` is its
baseline recipe.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipelab.errors import RecipelabError
from recipelab.recipe import (
    BYTE_VOCAB,
    Activation,
    Norm,
    Optimizer,
    Precision,
    Recipe,
    Schedule,
    Shape,
    param_count,
)

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
