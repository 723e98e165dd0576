"""Specification of :mod:`recipelab.trainer.device`: where a trial runs and what it reports
about the machine. The CPU path never touches CUDA or TransformerEngine; the GPU rules (fp8
needs compute capability 8.9 and TransformerEngine) refuse a recipe with a reason and a fix,
and are held here on the CPU against stand-ins at torch's and the file system's level."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import metadata
from pathlib import Path

import pytest
import torch

from recipelab import environment
from recipelab.errors import RecipelabError
from recipelab.recipe import Precision
from recipelab.targets import proxy_recipe
from recipelab.trainer.core import build_optimizer
from recipelab.trainer.device import (
    UnsupportedPrecision,
    autocast,
    check_precision,
    compile_cache_dir,
    configure_device,
    configure_threads,
    device_name,
    is_out_of_memory,
    keep_freed_memory,
    linear_factory,
    maybe_compile,
    optimizer_options,
    peak_memory_bytes,
    reset_peak_memory,
    resolve_device,
    synchronize,
    to_device,
)
from recipelab.trainer.model import GPT
from recipelab.trainer.spec import TrialSpec
from recipelab.units import GIB
from tests.trainer import te_standin

TINY = proxy_recipe("tiny")
CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # a device object only: making one needs no GPU
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the rule of a machine without CUDA")


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def pretend_gpu(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int]) -> None:
    """A CUDA GPU of ``capability`` for the fp8 rules, faked at torch's level: what
    ``torch.cuda`` says of its name and compute capability."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Test GPU")


def install_transformer_engine(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """An importable ``transformer_engine`` package on ``sys.path``: the fp8 rule looks for
    it without importing it."""
    (root / "transformer_engine").mkdir()
    (root / "transformer_engine" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))


# --- the device ----------------------------------------------------------------------------


@no_gpu
def test_cuda_asked_for_on_a_machine_without_it_is_refused_and_auto_falls_back_to_the_cpu(
) -> None:
    with pytest.raises(UnsupportedPrecision, match="device 'cuda' was requested but no CUDA") as e:
        resolve_device("cuda")
    assert "use --device auto or cpu" in str(e.value), "it says what to do"
    assert resolve_device("auto") == CPU == resolve_device("cpu")
    assert issubclass(UnsupportedPrecision, RecipelabError)
    assert issubclass(UnsupportedPrecision, RuntimeError)


@no_gpu
def test_the_cpu_path_never_calls_into_cuda() -> None:
    """On a torch without CUDA any call into ``torch.cuda`` raises, so these return only if
    each one kept to the CPU."""
    reset_peak_memory(CPU)
    synchronize(CPU)
    assert peak_memory_bytes(CPU) > 0
    assert device_name(CPU) == f"cpu:{platform.processor() or platform.machine()}"
    check_precision("bf16", CUDA)  # only fp8 asks the GPU anything


def test_the_cpu_path_imports_no_transformer_engine() -> None:
    code = ("import sys, torch\n"
            "from recipelab.trainer.device import autocast, check_precision, linear_factory\n"
            "cpu = torch.device('cpu')\n"
            "for precision in ('fp32', 'bf16'):\n"
            "    check_precision(precision, cpu)\n"
            "    linear_factory(precision)(16, 16)\n"
            "    with autocast(precision, cpu)():\n"
            "        pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('transformer_engine')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_the_cpu_peak_is_the_trainers_own_not_the_process_that_launched_it() -> None:
    # The process-wide peak (ru_maxrss) survives fork and exec: read naively, a trainer
    # started by a launcher holding 1 GiB would report at least 1 GiB of its own.
    ballast = bytearray(b"\x01" * GIB)
    code = ("import torch\nfrom recipelab.trainer.device import peak_memory_bytes\n"
            "print(peak_memory_bytes(torch.device('cpu')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    del ballast
    assert 0 < int(done.stdout) < GIB // 2


@pytest.mark.parametrize(("error", "expected"), [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (MemoryError(), True),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                  "memory: you tried to allocate 2147483648 bytes"), True),
    (RuntimeError("CUDA error: out of memory"), True),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
    (ValueError("memory_limit must be positive"), False),
], ids=["torch-oom", "memory-error", "cpu-allocator", "cuda-error", "shape-error", "value-error"])
def test_an_error_is_out_of_memory_by_its_type_or_by_what_cuda_and_the_cpu_allocator_say(
    error: BaseException, expected: bool,
) -> None:
    assert is_out_of_memory(error) is expected


# --- precision -----------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fp32_and_bf16_are_accepted_on_any_device(precision: Precision) -> None:
    check_precision(precision, CPU)
    check_precision(precision, CUDA)


def test_fp8_on_the_cpu_is_refused_saying_what_it_needs_and_what_to_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    install_transformer_engine(monkeypatch, tmp_path)  # TE alone is not enough
    with pytest.raises(UnsupportedPrecision,
                       match=r"compute capability >= 8\.9 with TransformerEngine; this trial "
                             r"runs on the CPU\. Use fp32"):
        check_precision("fp8", CPU)


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 6)], ids=["sm75", "sm80", "sm86"])
def test_fp8_on_a_gpu_older_than_ada_is_refused_naming_the_gpu_and_suggesting_bf16(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capability: tuple[int, int],
) -> None:
    pretend_gpu(monkeypatch, capability)
    install_transformer_engine(monkeypatch, tmp_path)
    major, minor = capability
    with pytest.raises(UnsupportedPrecision, match=rf"fp8 needs compute capability >= 8\.9; "
                                                   rf"NVIDIA Test GPU has {major}\.{minor}\. "
                                                   r"Use bf16\."):
        check_precision("fp8", CUDA)


@pytest.mark.parametrize("capability", [(8, 9), (9, 0), (10, 0), (12, 1)],
                         ids=["sm89", "sm90", "sm100", "sm121"])
def test_fp8_on_ada_or_newer_with_transformer_engine_is_accepted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capability: tuple[int, int],
) -> None:
    """Ada (8.9), Hopper (9.0), Blackwell (10.0) and the DGX Spark's GB10 (12.1)."""
    pretend_gpu(monkeypatch, capability)
    install_transformer_engine(monkeypatch, tmp_path)
    check_precision("fp8", CUDA)


@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None,
                    reason="TransformerEngine is installed here")
def test_fp8_without_transformer_engine_is_refused_naming_the_extra_that_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pretend_gpu(monkeypatch, (9, 0))
    with pytest.raises(UnsupportedPrecision, match=r"fp8 needs TransformerEngine: pip install "
                                                   r"'recipelab\[(\w+)\]' \(or use an NGC") as info:
        check_precision("fp8", CUDA)
    extra = re.search(r"recipelab\[(\w+)\]", str(info.value))
    assert extra is not None
    assert extra[1] in (metadata("recipelab").get_all("Provides-Extra") or [])


def test_fp32_runs_without_autocast_and_bf16_under_cpu_autocast() -> None:
    x = torch.randn(4, 8)
    with autocast("fp32", CPU)():
        assert not torch.is_autocast_enabled("cpu")
        assert (x @ x.T).dtype == torch.float32
    with autocast("bf16", CPU)():
        assert torch.is_autocast_enabled("cpu")
        assert (x @ x.T).dtype == torch.bfloat16


@pytest.mark.parametrize("with_autocast", [True, False], ids=["te.autocast", "te.fp8_autocast"])
def test_the_fp8_context_turns_te_on_with_a_delayed_scaling_recipe_in_every_te_version(
    monkeypatch: pytest.MonkeyPatch, with_autocast: bool,
) -> None:
    """TE 2.10 renamed ``fp8_autocast(fp8_recipe=...)`` to ``autocast(recipe=...)``."""
    state = te_standin.install(monkeypatch, with_autocast=with_autocast)
    context = autocast("fp8", CPU)
    with context():
        assert state.enabled
        assert torch.is_autocast_enabled("cpu")
    assert not state.enabled
    (recipe,) = state.recipes
    assert isinstance(recipe, te_standin.DelayedScaling)
    assert recipe.fp8_format is te_standin.Format.HYBRID


def test_linear_factory_builds_te_linear_layers_only_for_fp8(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    te_standin.install(monkeypatch)
    assert isinstance(linear_factory("fp8")(16, 32), te_standin.Linear)
    assert not isinstance(linear_factory("bf16")(16, 32), te_standin.Linear)


# --- speed settings ------------------------------------------------------------------------


def test_configure_threads_sets_torch_and_refuses_zero(restore_threads: None) -> None:
    assert configure_threads(1) == 1 == torch.get_num_threads()
    assert configure_threads(None) == 1, "None leaves the count as it is"
    with pytest.raises(RecipelabError, match="threads must be >= 1"):
        configure_threads(0)


def test_adamw_is_fused_on_cuda_and_on_the_cpu() -> None:
    assert optimizer_options(torch.device("cuda")) == {"fused": True}
    assert optimizer_options(torch.device("cpu")) == {"fused": True}
    assert optimizer_options(torch.device("meta")) == {}, "no fused kernel elsewhere"
    optimizer = build_optimizer(GPT(TINY.shape, TINY.seq_len), TINY, torch.device("cpu"))
    assert optimizer.defaults["fused"] is True


def test_a_cpu_batch_is_used_as_it_is_without_a_copy() -> None:
    batch = torch.zeros(2, 3, dtype=torch.long)
    assert to_device(batch, torch.device("cpu")) is batch


def test_tf32_is_enabled_for_cuda_devices_only() -> None:
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        configure_device(torch.device("cpu"))
        assert torch.get_float32_matmul_precision() == "highest"
        configure_device(torch.device("cuda"))  # sets flags only; needs no GPU
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.set_float32_matmul_precision(before)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = False


TRAINING_STEPS = """
import resource, torch
from recipelab.trainer.device import configure_device
configure_device(torch.device("cpu"))
torch.set_num_threads(1)
mlp = torch.nn.Sequential(torch.nn.Linear(192, 768), torch.nn.GELU(), torch.nn.Linear(768, 192))
x = torch.randn(4096, 192)  # the cpu preset's tokens per step: 12 MiB hidden activations
for step in range(60):
    if step == 10:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    mlp(x).square().mean().backward()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


def page_faults_after_ten_steps(keep_freed_memory: str) -> int:
    """Minor page faults of steps 11 to 60 of a small MLP's training, in a fresh process: the
    allocator settings are per process and cannot be undone."""
    done = subprocess.run([sys.executable, "-c", TRAINING_STEPS], capture_output=True,
                          text=True, check=True,
                          env={**os.environ, environment.KEEP_FREED_MEMORY: keep_freed_memory})
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc settings")
def test_a_cpu_trainer_process_reuses_the_memory_its_steps_free() -> None:
    # the kernel reclaiming idle pages of a loaded machine adds faults to either run, never
    # removes any: the fewer of two runs is the allocator's own count
    kept = min(page_faults_after_ten_steps("1") for _ in range(2))
    default = page_faults_after_ten_steps("0")
    # 50 steps of 12 MiB activations: here about 160,000 faults, 16,800 on a CI machine whose
    # kernel faults larger pages in; either way far more than one page per step.
    assert default > 5_000, "with glibc's defaults the steps fault their activations in again"
    assert kept * 10 < default, f"{kept:,} page faults with freed memory kept, {default:,} without"


@pytest.mark.parametrize("off", ["0", "off", "False", "no"])
def test_freed_memory_is_left_to_glibc_when_the_environment_says_so(
        off: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.KEEP_FREED_MEMORY, off)
    assert keep_freed_memory() is False


def test_compile_is_off_unless_asked_and_caches_under_recipelabs_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = GPT(TINY.shape, TINY.seq_len)
    assert maybe_compile(model, False) is model
    monkeypatch.setenv("RECIPELAB_CACHE", str(tmp_path))
    assert compile_cache_dir() == tmp_path / "torch-compile"
    assert TrialSpec(trial_id="x", recipe=TINY, out_dir=str(tmp_path)).compile is False
