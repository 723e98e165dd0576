"""Specification of the trainer's speed settings end to end: threads per trial, which trials
are compiled, and the fast model kernels that must equal their textbook forms. The device's
own settings (threads, fused AdamW, TF32, the allocator, the compile cache) are specified in
:mod:`tests.trainer.test_device`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from recipelab.agent.setup.settings import CampaignSettings, ExecutorSettings, LadderSettings
from recipelab.cli import app
from recipelab.targets import proxy_recipe
from recipelab.trainer.model import GPT, Block, gelu_tanh, make_norm
from recipelab.trainer.spec import CorpusSpec, TrialResult, TrialSpec

TINY = proxy_recipe("tiny")


def test_a_trial_runs_on_the_threads_its_spec_asks_for_whatever_the_environment_says(
    tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str],
) -> None:
    spec = TrialSpec(trial_id="threads", recipe=TINY.apply({"steps": 2}), corpus=corpus,
                     out_dir=str(tmp_path / "out"), device="cpu", threads=3)
    path = tmp_path / "spec.json"
    path.write_text(spec.model_dump_json())
    done = subprocess.run([sys.executable, "-m", "recipelab.trainer", "--spec", str(path)],
                          capture_output=True, text=True, env=trainer_env,  # OMP_NUM_THREADS=1
                          timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    result = TrialResult.model_validate_json(spec.result_path.read_text())
    assert result.status == "complete"
    assert result.provenance is not None and result.provenance.threads == 3


def test_train_threads_option_reaches_the_trainer_process(tmp_path: Path) -> None:
    out = tmp_path / "t"
    result = CliRunner().invoke(app, ["train", "--preset", "tiny", "--steps", "2",
                                      "--threads", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "result.json").read_text())
    assert record["provenance"]["threads"] == 3


@pytest.mark.parametrize(("parallel", "cores", "expected"),
                         [(1, 2, 2), (2, 2, 1), (3, 2, 1), (2, 8, 4), (1, 1, 1)])
def test_local_trials_share_the_cores_among_the_trials_in_flight(
    parallel: int, cores: int, expected: int,
) -> None:
    assert ExecutorSettings(parallel=parallel).trial_threads(cores) == expected


def test_explicit_threads_win_and_ray_tasks_keep_their_own() -> None:
    assert ExecutorSettings(parallel=2, threads=3).trial_threads(2) == 3
    assert ExecutorSettings(parallel=2, kind="ray").trial_threads(2) is None


def test_only_stress_runs_are_compiled_and_only_when_asked() -> None:
    asked = LadderSettings(compile_stress=True)
    assert asked.compiles("stress") and not asked.compiles("proxy")
    assert not LadderSettings().compiles("stress")
    spec = CampaignSettings(name="t", ladder=asked, executor=ExecutorSettings(parallel=1)).trial_spec(
        "s0001", "stress", proxy_recipe("tiny"), Path("out"), log_every=10)
    assert spec.compile, "the trial spec carries the ladder's compile rule"


def _textbook_rope(x: torch.Tensor) -> torch.Tensor:
    """RoPE of (B, heads, T, hd) by its definition: channel i and i + hd/2 of position t
    rotated by the angle t / 10000^(2i/hd)."""
    T, hd = x.size(-2), x.size(-1)
    inv_freq = 1.0 / 10_000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    angles = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_attention_rotating_queries_and_keys_in_one_pass_equals_the_textbook_layer(
    qk_norm: bool,
) -> None:
    shape = TINY.shape.model_copy(update={"n_head": 4, "n_kv_head": 2, "qk_norm": qk_norm})
    torch.manual_seed(0)
    block = GPT(shape, 32).blocks[0]
    assert isinstance(block, Block)
    attn = block.attn
    for norm in (attn.q_norm, attn.k_norm):
        if norm is not None:
            torch.nn.init.normal_(norm.get_parameter("weight"))  # not all ones, so a misplaced norm shows
    x = torch.randn(2, 32, shape.d_model)
    H, KV, hd = shape.n_head, shape.n_kv_head, shape.head_dim
    q, k, v = attn.qkv(x).split([H * hd, KV * hd, KV * hd], dim=-1)
    q = q.view(2, 32, H, hd).transpose(1, 2)
    k = k.view(2, 32, KV, hd).transpose(1, 2)
    v = v.view(2, 32, KV, hd).transpose(1, 2)
    if attn.q_norm is not None and attn.k_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = _textbook_rope(q), _textbook_rope(k)
    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = attn.out(y.transpose(1, 2).reshape(2, 32, H * hd))
    torch.testing.assert_close(attn(x), expected, rtol=1e-5, atol=1e-6)


def test_attention_without_rotation_or_qk_norm_equals_the_textbook_layer() -> None:
    """Learned positions: queries, keys and values come from one split of the projection."""
    shape = TINY.shape.model_copy(update={"n_head": 4, "n_kv_head": 2, "position": "learned"})
    torch.manual_seed(0)
    block = GPT(shape, 32).blocks[0]
    assert isinstance(block, Block)
    attn = block.attn
    x = torch.randn(2, 32, shape.d_model, requires_grad=True)
    H, KV, hd = shape.n_head, shape.n_kv_head, shape.head_dim
    q, k, v = attn.qkv(x).split([H * hd, KV * hd, KV * hd], dim=-1)
    q = q.view(2, 32, H, hd).transpose(1, 2)
    k = k.view(2, 32, KV, hd).transpose(1, 2).repeat_interleave(H // KV, dim=1)
    v = v.view(2, 32, KV, hd).transpose(1, 2).repeat_interleave(H // KV, dim=1)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = attn.out(y.transpose(1, 2).reshape(2, 32, H * hd))
    torch.testing.assert_close(attn(x), expected, rtol=1e-5, atol=1e-6)


def test_swiglu_gives_autograds_outputs_and_gradients_bit_for_bit() -> None:
    """The fused gate+up layer's hand-written backward runs autograd's own kernels, so a
    SwiGLU recipe trains exactly as it did when autograd differentiated it."""
    torch.manual_seed(0)
    block = GPT(TINY.shape, 16).blocks[0]
    assert isinstance(block, Block)
    ffn = block.ffn
    x = torch.randn(3, 16, TINY.shape.d_model, requires_grad=True)
    grad = torch.randn(3, 16, TINY.shape.d_model)
    leaves = (x, ffn.up.get_parameter("weight"), ffn.down.get_parameter("weight"))
    got = ffn(x)
    got.backward(grad)
    got_grads = [leaf.grad for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    gate, value = ffn.up(x).split(ffn.hidden, dim=-1)
    expected = ffn.down(torch.nn.functional.silu(gate) * value)
    expected.backward(grad)
    assert torch.equal(got, expected)
    for mine, leaf in zip(got_grads, leaves, strict=True):
        assert mine is not None and leaf.grad is not None and torch.equal(mine, leaf.grad)


def test_rmsnorm_matches_torchs_output_bitwise_and_its_gradients() -> None:
    """The written-out backward (the CPU fp32 path) against torch's ``nn.RMSNorm``: the same
    output bits, the same state-dict key (older checkpoints load), gradients equal to
    rounding."""
    torch.manual_seed(0)
    ours = make_norm("rmsnorm", 48)
    theirs = torch.nn.RMSNorm(48, eps=1e-6)
    torch.nn.init.normal_(theirs.weight)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(4, 16, 48, requires_grad=True)
    grad = torch.randn(4, 16, 48)
    got = ours(x)
    assert got.grad_fn is not None and "RMSNorm" in type(got.grad_fn).__name__, "fast path"
    got.backward(grad)
    got_grads = (x.grad, ours.get_parameter("weight").grad)
    x.grad = None
    expected = theirs(x)
    expected.backward(grad)
    assert torch.equal(got, expected)
    torch.testing.assert_close(got_grads[0], x.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grads[1], theirs.weight.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's own note
def test_rmsnorm_of_bf16_activations_keeps_torchs_upcasting_path() -> None:
    ours = make_norm("rmsnorm", 32)
    x = torch.randn(2, 8, 32).to(torch.bfloat16)
    torch.testing.assert_close(ours(x), torch.nn.RMSNorm(32, eps=1e-6)(x), rtol=0, atol=0)


def test_gelu_tanh_matches_torchs_tanh_gelu_and_its_gradient_to_rounding() -> None:
    """The written-out CPU fp32 GELU is torch's ``approximate="tanh"`` GELU, computed another
    way: outputs and gradients agree to fp32 rounding across the whole range, tails included
    (where ``x * sigmoid`` must not turn into a NaN)."""
    torch.manual_seed(0)
    x = torch.cat([torch.randn(4096) * 3, torch.tensor([-100.0, -20.0, -8.0, 0.0, 8.0, 20.0,
                                                          100.0])]).requires_grad_()
    grad = torch.randn_like(x)
    got = gelu_tanh(x)
    assert got.grad_fn is not None and "GELUTanh" in type(got.grad_fn).__name__, "fast path"
    (got_grad,) = torch.autograd.grad(got, x, grad)
    x64 = x.detach().double().requires_grad_()
    expected = torch.nn.functional.gelu(x64, approximate="tanh")
    (expected_grad,) = torch.autograd.grad(expected, x64, grad.double())
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_grad.double(), expected_grad, rtol=1e-5, atol=1e-5)


def test_gelu_tanh_of_bf16_activations_is_torchs_own_kernel() -> None:
    x = torch.randn(64).to(torch.bfloat16)
    expected = torch.nn.functional.gelu(x, approximate="tanh")
    torch.testing.assert_close(gelu_tanh(x), expected, rtol=0, atol=0)
