"""A stand-in for TransformerEngine that enforces its FP8 shape rules on a CPU.

TransformerEngine's FP8 GEMMs need a CUDA GPU of compute capability 8.9 or more, which the
test machines lack, so the fp8 path would otherwise go untested until it fails on a GPU. The
stand-in is installed as the ``transformer_engine`` package (``transformer_engine.pytorch``
and ``transformer_engine.common.recipe``), so the trainer's own ``linear_factory`` and
``autocast`` reach it exactly as they reach TE, through the same names and arguments.

Its ``Linear`` computes in full precision, but inside ``autocast`` it refuses what TE refuses,
with TE's exception type and message (read from TE 2.17+):

- forward, ``assert_dim_for_fp8_exec(input, weight)`` in ``pytorch/module/linear.py``: the
  product of each tensor's leading dimensions divisible by 8 and its last dimension by 16, or
  ``ValueError``;
- backward, the FP8 GEMMs' leading-dimension check in ``common/gemm/cublaslt_gemm.cu``: the
  data-gradient GEMM reduces over out_features and the weight-gradient GEMM over the tokens,
  each divisible by 16, or ``RuntimeError`` ("Caller must pad").
"""

from __future__ import annotations

import contextlib
import enum
import math
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

GEMM_SOURCE = "transformer_engine/common/gemm/cublaslt_gemm.cu in function CanonicalizeGemmInput"


@dataclass
class FP8State:
    """What the stand-in saw: whether FP8 is on now, and the FP8 GEMMs it checked."""

    enabled: bool = False
    forward_gemms: int = 0
    backward_gemms: int = 0
    recipes: list[Any] = field(default_factory=list)


STATE = FP8State()


def assert_dim_for_fp8_exec(*tensors: torch.Tensor) -> None:
    """TE's forward-pass rule for FP8 GEMM operands, with TE's exception and message."""
    for tensor in tensors:
        leading = math.prod(tensor.shape[:-1])
        if leading % 8 != 0 or tensor.shape[-1] % 16 != 0:
            raise ValueError(
                "FP8 execution requires the product of all dimensions except the last to be"
                " divisible by 8 and the last dimension to be divisible by 16, but got tensor"
                f" with dims={list(tensor.size())} (product of leading dims ="
                f" {leading}, last dim = {tensor.shape[-1]})"
            )


def check_leading_dimension(size: int) -> None:
    """cuBLASLt's FP8 rule as TE enforces it before a GEMM: the reduced dimension, which is
    the leading dimension of both TN-layout operands, divisible by 16."""
    if size % 16 != 0:
        raise RuntimeError(f"{GEMM_SOURCE}: Assertion failed: ret.lda % 16 == 0. Leading "
                           "dimension requirement on A for FP8 GEMM. Caller must pad.")


class _FP8Gemm(torch.autograd.Function):
    """``x @ weight.T`` whose backward checks the two GEMMs TE runs in FP8."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, weight = ctx.saved_tensors
        out_features, in_features = weight.shape
        check_leading_dimension(out_features)  # dgrad: grad (T, out) @ weight (out, in)
        check_leading_dimension(math.prod(x.shape[:-1]))  # wgrad: grad.T (out, T) @ x (T, in)
        STATE.backward_gemms += 2
        grad_x = grad @ weight
        grad_weight = grad.reshape(-1, out_features).t() @ x.reshape(-1, in_features)
        return grad_x, grad_weight


class Linear(nn.Linear):
    """``te.Linear``'s constructor arguments that recipelab uses, and TE's FP8 shape rules."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 **_: Any) -> None:
        super().__init__(in_features, out_features, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not STATE.enabled:
            return super().forward(x)
        assert_dim_for_fp8_exec(x, self.weight)
        STATE.forward_gemms += 1
        out: torch.Tensor = _FP8Gemm.apply(x, self.weight)  # type: ignore[no-untyped-call]
        if self.bias is not None:
            out = out + self.bias
        return out


class Format(enum.Enum):
    E4M3 = "E4M3"
    E5M2 = "E5M2"
    HYBRID = "HYBRID"


@dataclass(frozen=True)
class DelayedScaling:
    """TE's ``DelayedScaling`` fields and defaults (an unknown argument is a TypeError)."""

    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str | Callable[..., Any] = "max"
    scaling_factor_compute_algo: Callable[..., Any] | None = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False


@contextlib.contextmanager
def autocast(enabled: bool = True, calibrating: bool = False, recipe: Any = None,
             amax_reduction_group: Any = None) -> Iterator[None]:
    """TE 2.10+'s ``te.autocast`` signature; FP8 is on inside it."""
    previous = STATE.enabled
    STATE.enabled = enabled
    STATE.recipes.append(recipe)
    try:
        yield
    finally:
        STATE.enabled = previous


def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: Any = None,
                 fp8_group: Any = None) -> contextlib.AbstractContextManager[None]:
    """The name and signature before TE 2.10 (deprecated since)."""
    return autocast(enabled, calibrating, fp8_recipe, fp8_group)


def install(monkeypatch: pytest.MonkeyPatch, *, with_autocast: bool = True) -> FP8State:
    """Make ``import transformer_engine.pytorch`` find the stand-in; ``with_autocast=False``
    mimics a TE before 2.10, which has only ``fp8_autocast``."""
    pytorch = types.ModuleType("transformer_engine.pytorch")
    pytorch.Linear = Linear  # type: ignore[attr-defined]
    pytorch.fp8_autocast = fp8_autocast  # type: ignore[attr-defined]
    if with_autocast:
        pytorch.autocast = autocast  # type: ignore[attr-defined]
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.DelayedScaling = DelayedScaling  # type: ignore[attr-defined]
    recipe.Format = Format  # type: ignore[attr-defined]
    common = types.ModuleType("transformer_engine.common")
    common.recipe = recipe  # type: ignore[attr-defined]
    package = types.ModuleType("transformer_engine")
    package.pytorch = pytorch  # type: ignore[attr-defined]
    package.common = common  # type: ignore[attr-defined]
    for name, module in (("transformer_engine", package), ("transformer_engine.pytorch", pytorch),
                         ("transformer_engine.common", common),
                         ("transformer_engine.common.recipe", recipe)):
        monkeypatch.setitem(sys.modules, name, module)
    fresh = FP8State()
    monkeypatch.setattr(sys.modules[__name__], "STATE", fresh)
    return fresh
