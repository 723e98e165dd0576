"""The cluster a long run ran on, for its manifest: the software stack and the hardware.

A cloud run that diverges, or runs slower than the report predicted, is first compared by
what it ran on: the torch, CUDA runtime, cuDNN and NCCL versions, the NVIDIA driver, the
number of nodes and GPUs and which GPUs. :func:`cluster_info` gathers them in one
dictionary. Nothing here raises because a piece is missing: on a machine without CUDA (or
without NVML) each GPU field is ``None`` and ``unavailable`` says why, field by field.

The node count comes from what ``torchrun`` puts in every worker's environment:
``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` (documented in ``torch.distributed.run``), and
``GROUP_WORLD_SIZE``, the number of worker groups, which torchrun's local elastic agent
also sets and which is the number of nodes when each node runs one group (always, under
torchrun). ``NNODES`` is read last, for launchers that set it themselves.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import torch

from recipelab.guardrails.hardware import gpu_memory_bytes
from recipelab.trainer.telemetry import load_nvml

GPU_FIELDS = ("cuda_runtime", "cudnn", "nccl", "driver", "gpus_per_node", "gpus")


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    try:
        value = int(env.get(name, ""))
    except ValueError:
        return None
    return value if value >= 1 else None


def node_layout(world_size: int, env: Mapping[str, str]) -> tuple[int, int]:
    """``(nodes, processes per node)`` of a launch of ``world_size`` processes."""
    local = _positive_int(env, "LOCAL_WORLD_SIZE")
    nodes = _positive_int(env, "GROUP_WORLD_SIZE")
    if nodes is None and local is not None:
        nodes = -(-world_size // local)
    if nodes is None:
        nodes = _positive_int(env, "NNODES") or 1
    return nodes, local if local is not None else -(-world_size // nodes)


def cudnn_version(number: int) -> str:
    """cuDNN's version number as text: 90100 is 9.1.0 (cuDNN 9 counts minors by 100, not
    by 1,000 as 8902 = 8.9.2 did)."""
    if number >= 10_000:
        major, rest = divmod(number, 10_000)
    else:
        major, rest = divmod(number, 1_000)
    return f"{major}.{rest // 100}.{rest % 100}"


def nccl_version(parts: tuple[Any, ...] | int) -> str:
    """``torch.cuda.nccl.version()`` as text: (2, 21, 5) is 2.21.5, with a suffix if any."""
    if isinstance(parts, int):  # torch before 1.13 returned major*1000 + minor*100 + patch
        return cudnn_version(parts)
    text = ".".join(str(p) for p in parts[:3])
    return f"{text}{parts[3]}" if len(parts) > 3 and parts[3] else text


def driver_version(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``(NVIDIA driver version, None)`` through NVML, or ``(None, why not)``."""
    pynvml, _, reason = load_nvml(env)
    if pynvml is None:
        return None, reason
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        return (version.decode() if isinstance(version, bytes) else str(version)), None
    except Exception as error:  # an NVMLError of any kind: the manifest goes on without it
        return None, f"NVML did not report the driver: {type(error).__name__}: {error}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def local_gpus() -> list[dict[str, object]]:
    """Every GPU this process sees on its node: index, name, memory and compute capability."""
    gpus: list[dict[str, object]] = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append({"index": index, "name": props.name, "memory_bytes": gpu_memory_bytes(props),
                     "compute_capability": f"{props.major}.{props.minor}"})
    return gpus


def cluster_info(world_size: int, device: torch.device,
                 env: Mapping[str, str] | None = None) -> dict[str, object]:
    """The manifest's ``cluster``: versions, nodes and GPUs of a run of ``world_size``
    processes on ``device`` (as torchrun's environment ``env`` describes the launch).

    ``unavailable`` maps each ``None`` field to the reason it is missing.
    """
    env = os.environ if env is None else env
    nodes, per_node = node_layout(world_size, env)
    info: dict[str, object] = {"torch": torch.__version__, "device": device.type,
                               "world_size": world_size, "nodes": nodes,
                               "processes_per_node": per_node, **dict.fromkeys(GPU_FIELDS)}
    unavailable: dict[str, str] = {}
    info["cuda_runtime"] = torch.version.cuda
    if not torch.cuda.is_available():
        why = (f"torch {torch.__version__} is a CPU-only build" if torch.version.cuda is None
               else f"torch (CUDA {torch.version.cuda}) sees no CUDA GPU on this machine")
        unavailable.update((name, why) for name in GPU_FIELDS if info[name] is None)
    else:
        cudnn = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
        info["cudnn"] = None if cudnn is None else cudnn_version(cudnn)
        if cudnn is None:
            unavailable["cudnn"] = "torch.backends.cudnn reports no cuDNN in this build"
        try:
            info["nccl"] = nccl_version(torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
        except Exception as error:  # a build without NCCL: AttributeError, RuntimeError
            unavailable["nccl"] = f"torch has no NCCL: {type(error).__name__}: {error}"
        driver, why_not = driver_version(env)
        info["driver"] = driver
        if why_not is not None:
            unavailable["driver"] = why_not
        if device.type == "cuda":
            gpus = local_gpus()
            info["gpus_per_node"], info["gpus"] = len(gpus), gpus
        else:
            for name in ("gpus_per_node", "gpus"):
                unavailable[name] = f"the run is on the {device.type}, not on a GPU"
    info["unavailable"] = unavailable
    return info
