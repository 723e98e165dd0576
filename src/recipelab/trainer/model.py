"""The proxy GPT: one readable file, every architectural knob of :class:`~recipelab.recipe.Shape`.

Llama-style decoder: pre-norm blocks (RMSNorm or LayerNorm), grouped-query attention through
``scaled_dot_product_attention``, RoPE (with its base) or learned positions, optional QK-norm,
a SwiGLU, GELU or ReLU² feed-forward and optional logit soft-capping. Projections are fused
(one QKV matmul, one gate+up matmul) because at proxy sizes the number of kernel launches,
not FLOPs, sets the step time.

The parameter count equals :func:`recipelab.recipe.param_count` exactly; a test holds it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from recipelab.recipe import Shape, Stability

LinearFactory = Callable[[int, int], nn.Module]


def plain_linear(in_features: int, out_features: int) -> nn.Module:
    return nn.Linear(in_features, out_features, bias=False)


def make_norm(kind: str, width: int) -> nn.Module:
    if kind == "rmsnorm":
        return RMSNorm(width, eps=1e-6)
    return nn.LayerNorm(width, eps=1e-5)


class _RMSNormFunction(torch.autograd.Function):
    """RMSNorm over the last dimension with its backward written out.

    torch's CPU RMSNorm is a composite of six kernels whose autograd backward runs about a
    dozen more, each a full pass over the activations; LayerNorm, by contrast, is one fused
    kernel each way. The forward here runs the composite's own kernels in its order (so its
    output is bitwise the same); the backward is the closed form
    ``dx = rstd * (g*w - x_hat * mean(g*w * x_hat))``, ``dw = sum(g * x_hat)``, in fewer passes.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None,
                eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
        normed = x * rstd
        ctx.save_for_backward(normed, rstd, weight)
        return normed * weight if weight is not None else normed

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        normed, rstd, weight = ctx.saved_tensors
        grad_weight = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (grad * normed).reshape(-1, normed.size(-1)).sum(0)
        grad_normed = grad * weight if weight is not None else grad
        grad_x = None
        if ctx.needs_input_grad[0]:
            mean = (grad_normed * normed).mean(-1, keepdim=True)
            grad_x = (grad_normed - normed * mean).mul_(rstd)
        return grad_x, grad_weight, None


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` (same parameter, same state-dict key, bitwise the same output) with the
    written-out backward of :class:`_RMSNormFunction` for fp32 on the CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type != "cpu" or x.dtype != torch.float32
                or tuple(self.normalized_shape) != (x.size(-1),)):
            return super().forward(x)  # a GPU has a fused kernel; bf16 keeps torch's upcasting
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        out: torch.Tensor = _RMSNormFunction.apply(  # type: ignore[no-untyped-call]
            x, self.weight, eps)
        return out


class _SwiGLUFunction(torch.autograd.Function):
    """``silu(gate) * value`` of the fused gate+up projection's output ``h = [gate | value]``.

    The same kernels autograd would run, in the same order (so the same bits), except that
    both halves of the gradient are written straight into one ``h``-shaped tensor: autograd
    would produce them separately and then copy them together (the backward of ``split``),
    a full extra pass over the widest activation of the block.
    """

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, hidden: int) -> torch.Tensor:
        gate, value = h.narrow(-1, 0, hidden), h.narrow(-1, hidden, hidden)
        activated = F.silu(gate)
        ctx.save_for_backward(h, activated)
        ctx.hidden = hidden
        out: torch.Tensor = activated * value
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        h, activated = ctx.saved_tensors
        hidden = ctx.hidden
        gate, value = h.narrow(-1, 0, hidden), h.narrow(-1, hidden, hidden)
        grad_h = torch.empty_like(h)
        grad_gate, grad_value = grad_h.narrow(-1, 0, hidden), grad_h.narrow(-1, hidden, hidden)
        torch.mul(grad, activated, out=grad_value)
        torch.ops.aten.silu_backward.grad_input(grad * value, gate, grad_input=grad_gate)
        return grad_h, None


GELU_TANH_SCALE = 2 * math.sqrt(2 / math.pi)
GELU_TANH_CUBIC = 0.044715


class _GELUTanhFunction(torch.autograd.Function):
    """GELU's tanh form, ``0.5 x (1 + tanh(u))`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)``,
    computed as the identical ``x * sigmoid(2u)`` with its backward written out.

    The same function as ``F.gelu(x, approximate="tanh")`` to fp32 rounding, but torch's CPU
    tanh costs about 3x its sigmoid on AVX2, and its GELU runs that tanh again in the
    backward. Here the forward keeps ``sigmoid(2u)`` for the backward, which is then a few
    multiply-adds: about a third less time per layer, for one more ``ffn_hidden``-wide
    tensor saved per token (the memory model counts it).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        gate = torch.addcmul(x.new_tensor(GELU_TANH_SCALE), x, x,
                             value=GELU_TANH_SCALE * GELU_TANH_CUBIC)
        gate = gate.mul_(x).sigmoid_()  # sigmoid(2u) = (1 + tanh(u)) / 2
        ctx.save_for_backward(x, gate)
        return x * gate

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        x, gate = ctx.saved_tensors
        # d/dx x s(2u) = s + x s (1 - s) 2u', where 2u' = scale (1 + 3 cubic x^2)
        slope = torch.addcmul(x.new_tensor(GELU_TANH_SCALE), x, x,
                              value=3 * GELU_TANH_SCALE * GELU_TANH_CUBIC)
        slope.mul_(x).mul_(torch.addcmul(gate, gate, gate, value=-1)).add_(gate)
        return slope.mul_(grad)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh form: the written-out :class:`_GELUTanhFunction` for fp32 on the CPU,
    torch's fused kernel elsewhere."""
    if x.device.type != "cpu" or x.dtype != torch.float32:
        return F.gelu(x, approximate="tanh")
    out: torch.Tensor = _GELUTanhFunction.apply(x)  # type: ignore[no-untyped-call]
    return out


class Rotary(nn.Module):
    """Rotary position embedding with cos/sin tables computed once, not per step.

    It rotates tensors laid out (B, T, heads, hd), so the queries and keys of one layer are
    rotated together in one pass over the fused projection's output: half the kernels of
    rotating each, which on a CPU at proxy sizes is half the time.
    """

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_len: int, base: float = 10_000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)  # (T, hd/2)
        self.register_buffer("cos", angles.cos()[:, None, :], persistent=False)  # (T, 1, hd/2)
        self.register_buffer("sin", angles.sin()[:, None, :], persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, heads, hd)
        T = x.size(1)
        cos, sin = self.cos[:T], self.sin[:T]
        x1, x2 = x.float().chunk(2, dim=-1)
        rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: Shape, rotary: Rotary | None, linear: LinearFactory) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = shape.n_head, shape.n_kv_head, shape.head_dim
        self.qkv = linear(shape.d_model, shape.attn_width + 2 * shape.kv_width)
        self.out = linear(shape.attn_width, shape.d_model)
        self.q_norm = make_norm(shape.norm, shape.head_dim) if shape.qk_norm else None
        self.k_norm = make_norm(shape.norm, shape.head_dim) if shape.qk_norm else None
        self.rotary = rotary

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        H, KV = self.n_head, self.n_kv_head
        qkv = self.qkv(x).view(B, T, H + 2 * KV, self.head_dim)  # (B, T, H+2KV, hd)
        if self.rotary is None and self.q_norm is None:
            q, k, v = qkv.split([H, KV, KV], dim=2)  # one split: one copy in the backward
        else:
            qk, v = qkv.split([H + KV, KV], dim=2)
            if self.q_norm is not None and self.k_norm is not None:
                q, k = qk.split([H, KV], dim=2)
                qk = torch.cat((self.q_norm(q), self.k_norm(k)), dim=2)
            if self.rotary is not None:
                qk = self.rotary(qk)  # queries and keys in one pass
            q, k = qk.split([H, KV], dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, hd)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.n_kv_head != self.n_head)
        out: torch.Tensor = self.out(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))
        return out


class FeedForward(nn.Module):
    def __init__(self, shape: Shape, linear: LinearFactory) -> None:
        super().__init__()
        self.activation = shape.activation
        self.hidden = shape.ffn_hidden
        width = 2 * self.hidden if self.activation == "swiglu" else self.hidden
        self.up = linear(shape.d_model, width)
        self.down = linear(self.hidden, shape.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.activation == "swiglu":
            h = _SwiGLUFunction.apply(h, self.hidden)  # type: ignore[no-untyped-call]
        elif self.activation == "gelu":
            h = gelu_tanh(h)
        elif self.activation == "gelu_exact":
            h = F.gelu(h)  # the erf form: one fused kernel each way, no tanh to rewrite
        else:
            h = F.relu(h).square()
        out: torch.Tensor = self.down(h)
        return out


class Block(nn.Module):
    def __init__(self, shape: Shape, rotary: Rotary | None, linear: LinearFactory) -> None:
        super().__init__()
        self.attn_norm = make_norm(shape.norm, shape.d_model)
        self.attn = Attention(shape, rotary, linear)
        self.ffn_norm = make_norm(shape.norm, shape.d_model)
        self.ffn = FeedForward(shape, linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        out: torch.Tensor = x + self.ffn(self.ffn_norm(x))
        return out


class GPT(nn.Module):
    """The proxy model. ``stability`` sets the initialisation scales and logit soft-capping;
    its defaults are GPT-2's initialisation and no cap."""

    def __init__(self, shape: Shape, max_len: int, linear: LinearFactory = plain_linear,
                 stability: Stability | None = None) -> None:
        super().__init__()
        stability = stability or Stability()
        self.shape = shape
        self.softcap = stability.logit_softcap
        self.embed = nn.Embedding(shape.vocab_size, shape.d_model)
        self.positions = (nn.Embedding(max_len, shape.d_model)
                          if shape.position == "learned" else None)
        # One rotary table shared by every block: it is a buffer, not a parameter.
        rotary = (Rotary(shape.head_dim, max_len, shape.rope_base)
                  if shape.position == "rope" else None)
        self.blocks = nn.ModuleList(Block(shape, rotary, linear) for _ in range(shape.n_layer))
        residual_projections = [proj for block in self.blocks if isinstance(block, Block)
                                for proj in (block.attn.out, block.ffn.down)]
        self.final_norm = make_norm(shape.norm, shape.d_model)
        self.lm_head = nn.Linear(shape.d_model, shape.vocab_size, bias=False)
        if shape.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        # Every matrix is drawn in module order (the output layer last), then the residual
        # projections are drawn again: the random stream, and so the weights, of a given
        # seed stay what they were before the scales became knobs.
        output_std = stability.init_std if shape.tie_embeddings else stability.output_init_std
        for module in self.modules():
            std = output_std if module is self.lm_head else stability.init_std
            weight = getattr(module, "weight", None)
            if isinstance(weight, nn.Parameter) and weight.dim() == 2:
                nn.init.normal_(weight, mean=0.0, std=std)
        residual_std = stability.init_std
        if stability.depth_scaled_init:
            residual_std /= math.sqrt(2 * shape.n_layer)
        for proj in residual_projections:
            weight = getattr(proj, "weight", None)
            if isinstance(weight, torch.Tensor):
                nn.init.normal_(weight, mean=0.0, std=residual_std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits of shape (B, T, vocab) for token ids ``idx`` of shape (B, T)."""
        x = self.embed(idx)  # (B, T, C)
        if self.positions is not None:
            x = x + self.positions(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.lm_head(self.final_norm(x))
        if self.softcap > 0:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        return logits

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())
