"""Where a trial runs and what it reports about the machine: device choice, peak memory,
precision contexts and provenance. CUDA and TransformerEngine are imported lazily and only
on the paths that need them, so the CPU path never touches them."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import os
import platform
import resource
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recipelab import __version__, environment
from recipelab.errors import RecipelabError
from recipelab.recipe import Precision
from recipelab.trainer.model import LinearFactory, plain_linear
from recipelab.trainer.spec import Provenance, code_version

FP8_MIN_CAPABILITY = (8, 9)


class UnsupportedPrecision(RecipelabError, RuntimeError):
    """The recipe asks for a precision (or a device) this machine cannot run; never train
    another one."""


def resolve_device(requested: str) -> torch.device:
    """``auto`` is CUDA when a device is visible, else the CPU; ``cuda`` without one is
    refused with what to do."""
    if requested == "cuda" and not torch.cuda.is_available():
        built = "built with CUDA" if torch.version.cuda else "a CPU-only build"
        raise UnsupportedPrecision(
            f"device 'cuda' was requested but no CUDA device is visible (torch "
            f"{torch.__version__}, {built}): use --device auto or cpu, or check the driver "
            "and CUDA_VISIBLE_DEVICES")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def configure_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count when ``threads`` is given; returns the count in use.

    Trials that share a machine's cores each need their own share: two OpenMP pools of all
    cores on one machine spin against each other and both slow down several fold.
    """
    if threads is not None:
        if threads < 1:
            raise RecipelabError(f"threads must be >= 1, got {threads}; use None for torch's "
                                 "default")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def compile_cache_dir() -> Path:
    """Where torch.compile keeps its compiled graphs between trials: under recipelab's cache
    (``$RECIPELAB_CACHE``, default ``~/.cache/recipelab``), so every trial after the first
    reuses the kernels instead of compiling them again."""
    return environment.cache_dir() / "torch-compile"


def maybe_compile(model: nn.Module, enabled: bool) -> nn.Module:
    """``torch.compile(model)`` with a persistent cache when ``enabled``, else ``model``.

    Compiling costs seconds before the first step even with a warm cache, so it pays only
    for runs long enough to win them back (stress runs); it stays off by default.
    """
    if not enabled:
        return model
    cache = compile_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for variable, folder in environment.TORCH_CACHES.items():
        os.environ.setdefault(variable, str(cache / folder))
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    compiled: nn.Module = torch.compile(model)  # type: ignore[assignment]
    return compiled


def configure_device(device: torch.device) -> None:
    """Speed settings of a CUDA device: TF32 tensor cores for the matmuls and convolutions of
    an fp32 recipe (10-bit mantissa, the accuracy every fp32 pretraining run accepts) and
    cuDNN's autotuner. The CPU keeps full fp32, and its process keeps the memory it frees
    (:func:`keep_freed_memory`)."""
    if device.type != "cuda":
        keep_freed_memory()
        return
    torch.set_float32_matmul_precision("high")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD_MAX = 32 * 2**20  # the largest M_MMAP_THRESHOLD glibc accepts on 64-bit
NEVER_TRIM = 2**31 - 1  # M_TRIM_THRESHOLD is a C int
OFF = frozenset({"0", "false", "no", "off"})


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory a training step frees for the next step.

    A CPU step allocates and frees the same activation-sized tensors, megabytes each, every
    step. By default glibc serves many of them from fresh ``mmap`` pages or trims them off
    the heap when freed, so each step page-faults its activations in again. Serving blocks
    up to 32 MiB from the heap and never trimming it took a ``cpu``-preset trial from 300,000
    to 435,000 minor page faults down to 135,000, and its step time down by 2% to 3%
    (``bench/host_memory.py``). The resident set then stays at the step's peak, which is what
    the memory guardrail budgets anyway.

    Returns whether the allocator took both settings: not with another C library (musl,
    macOS), nor when ``RECIPELAB_KEEP_FREED_MEMORY`` is 0, false, no or off: glibc's defaults.
    """
    setting = environment.read(environment.KEEP_FREED_MEMORY)
    if setting is not None and setting.lower() in OFF:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(
        mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))


def optimizer_options(device: torch.device) -> dict[str, bool]:
    """The AdamW implementation for ``device``: one fused kernel on CUDA; on the CPU, torch's
    fused kernel too, which measured faster than both the per-tensor loop and ``foreach``
    (``foreach`` has no CPU kernels and falls back to the loop)."""
    if device.type in ("cuda", "cpu"):
        return {"fused": True}
    return {}


def to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move a host batch to ``device``: through pinned memory and a non-blocking copy on
    CUDA, so the copy overlaps the previous step's kernels; unchanged on the CPU."""
    if device.type != "cuda":
        return batch
    return batch.pin_memory().to(device, non_blocking=True)


def check_precision(precision: Precision, device: torch.device) -> None:
    """Refuse fp8 where TransformerEngine or an sm_89+ GPU is missing."""
    if precision != "fp8":
        return
    if device.type != "cuda":
        raise UnsupportedPrecision(
            "fp8 needs a CUDA GPU of compute capability >= 8.9 with TransformerEngine; "
            "this trial runs on the CPU. Use fp32 (or bf16 on a GPU).")
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_MIN_CAPABILITY:
        raise UnsupportedPrecision(
            f"fp8 needs compute capability >= 8.9; {torch.cuda.get_device_name(device)} "
            f"has {capability[0]}.{capability[1]}. Use bf16.")
    if importlib.util.find_spec("transformer_engine") is None:
        raise UnsupportedPrecision(
            "fp8 needs TransformerEngine: pip install 'recipelab[fp8]' (or use an NGC PyTorch "
            "container, which ships it).")


def linear_factory(precision: Precision) -> LinearFactory:
    """``te.Linear`` for fp8 (TransformerEngine casts its GEMMs to FP8), else ``nn.Linear``.

    Only the blocks' projections come from here (:meth:`recipelab.recipe.Shape.linear_layers`,
    all of whose widths are multiples of 16 in a derived proxy); the output head stays an
    ``nn.Linear`` and runs in bf16 under autocast.
    """
    if precision != "fp8":
        return plain_linear
    import transformer_engine.pytorch as te

    def te_linear(in_features: int, out_features: int) -> nn.Module:
        module: nn.Module = te.Linear(in_features, out_features, bias=False)
        return module

    return te_linear


def autocast(precision: Precision, device: torch.device) -> Callable[[], AbstractContextManager[Any]]:
    """A factory of the forward-pass precision context for this recipe."""
    if precision == "fp32":
        return contextlib.nullcontext
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return _fp8_autocast(device)


def _fp8_autocast(device: torch.device) -> Callable[[], AbstractContextManager[Any]]:
    """TransformerEngine's FP8 context inside bf16 autocast, entered around the forward pass
    only (TE runs the backward from what the forward recorded).

    DelayedScaling is the per-tensor recipe every FP8 GPU runs, from Ada (8.9) to GB10
    (12.1), where MXFP8 is not supported. TE 2.10 renamed ``fp8_autocast(fp8_recipe=...)``
    to ``autocast(recipe=...)``; both are handled. TE refuses DelayedScaling inside
    ``torch.compile``, so a compiled fp8 model needs another recipe.
    """
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling, Format

    scaling = DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16,
                             amax_compute_algo="max")
    te_autocast = getattr(te, "autocast", None)

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        fp8 = (te_autocast(enabled=True, recipe=scaling) if te_autocast is not None
               else te.fp8_autocast(enabled=True, fp8_recipe=scaling))
        with torch.autocast(device.type, dtype=torch.bfloat16), fp8:
            yield

    return context


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error)
    return "out of memory" in text or "can't allocate memory" in text


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: the caching allocator's peak; CPU: the process's peak resident set size.

    On Linux the CPU figure is ``VmHWM``, the peak of this program's own address space:
    ``ru_maxrss`` survives ``execve``, so a trainer started by a large process (a pytest
    run, an orchestrator) would report its launcher's size instead of its own.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.processor() or platform.machine()}"


def _library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "recipelab": __version__}
    for name in ("torch", "numpy", "tokenizers", "pyarrow", "safetensors", "transformer-engine"):
        with contextlib.suppress(PackageNotFoundError):
            versions[name] = version(name)
    return versions


@functools.cache
def provenance(device: torch.device, seed: int) -> Provenance:
    return Provenance(
        device=device_name(device),
        host=socket.gethostname(),
        code_version=code_version(),
        python=sys.version.split()[0],
        libraries=_library_versions(),
        seed=seed,
        threads=torch.get_num_threads(),
    )
