"""The cluster manifest: versions, nodes and GPUs, with a reason for every missing field."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import psutil
import pytest
import torch

from recipelab.longrun.cluster import GPU_FIELDS, cluster_info, cudnn_version, node_layout

GIB = 2**30


def test_on_this_cpu_machine_every_gpu_field_is_none_with_a_reason() -> None:
    if torch.cuda.is_available():
        pytest.skip("this test describes a machine without CUDA")
    info = cluster_info(2, torch.device("cpu"), env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})
    assert info["torch"] == torch.__version__
    assert (info["device"], info["world_size"], info["nodes"], info["processes_per_node"]) == (
        "cpu", 2, 1, 2)
    assert all(info[name] is None for name in GPU_FIELDS)
    unavailable = info["unavailable"]
    assert isinstance(unavailable, dict) and set(unavailable) == set(GPU_FIELDS)
    assert all("CPU-only build" in reason or "sees no CUDA GPU" in reason
               for reason in unavailable.values())


@pytest.mark.parametrize(("env", "world", "layout"), [
    ({}, 1, (1, 1)),  # a plain process
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "1"}, 8, (1, 8)),
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "2"}, 16, (2, 8)),
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, 16, (2, 8)),  # an older torchrun
    ({"GROUP_WORLD_SIZE": "2"}, 16, (2, 8)),  # the worker groups alone say the nodes
    ({"NNODES": "4"}, 32, (4, 8)),  # a launcher of its own that says only the node count
    ({"LOCAL_WORLD_SIZE": "zero"}, 2, (1, 2)),  # nonsense is ignored, not an exception
])
def test_nodes_and_processes_per_node_come_from_torchruns_environment(
        env: dict[str, str], world: int, layout: tuple[int, int]) -> None:
    assert node_layout(world, env) == layout


def test_cudnn_version_numbers_read_as_their_release() -> None:
    assert cudnn_version(90100) == "9.1.0"  # cuDNN 9: major*10000 + minor*100 + patch
    assert cudnn_version(8902) == "8.9.2"  # cuDNN 8: major*1000 + minor*100 + patch


def fake_nvml(driver: str | bytes, gpus: int) -> ModuleType:
    """NVML's module as nvidia-ml-py provides it: a fake, since this machine has no GPU and
    no NVIDIA driver for the real library to talk to."""
    module = ModuleType("pynvml")
    calls: list[str] = []
    module.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: gpus  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda index: ("handle", index)  # type: ignore[attr-defined]
    module.nvmlSystemGetDriverVersion = lambda: driver  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module


@pytest.fixture
def two_h100s_and_a_gb10(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """torch.cuda and NVML answering as on a node with three GPUs, faked at the functions
    torch and nvidia-ml-py expose because there is no GPU here."""
    devices = [SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * GIB, major=9,
                               minor=0, is_integrated=False)] * 2 + [
        SimpleNamespace(name="NVIDIA GB10", total_memory=4 * GIB, major=12, minor=1,
                        is_integrated=True)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: devices[index])
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 26, 2))
    nvml = fake_nvml(b"570.124.06", len(devices))  # bytes, as older nvidia-ml-py returns
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_on_a_gpu_node_the_manifest_names_every_version_node_and_gpu(
        two_h100s_and_a_gb10: ModuleType) -> None:
    env = {"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "3", "GROUP_WORLD_SIZE": "2"}
    info = cluster_info(6, torch.device("cuda", 0), env=env)
    assert {k: info[k] for k in ("cuda_runtime", "cudnn", "nccl", "driver")} == {
        "cuda_runtime": "12.8", "cudnn": "9.1.0", "nccl": "2.26.2", "driver": "570.124.06"}
    assert (info["nodes"], info["processes_per_node"], info["gpus_per_node"]) == (2, 3, 3)
    assert info["gpus"] == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * GIB,
         "compute_capability": "9.0"},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * GIB,
         "compute_capability": "9.0"},
        # unified memory: the GB10 allocates from the host's RAM
        {"index": 2, "name": "NVIDIA GB10", "memory_bytes": psutil.virtual_memory().total,
         "compute_capability": "12.1"},
    ]
    assert info["unavailable"] == {}
    assert two_h100s_and_a_gb10.calls == ["init", "shutdown"]


def test_without_nvml_the_driver_alone_is_missing_and_says_why(
        two_h100s_and_a_gb10: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    info = cluster_info(1, torch.device("cuda", 0), env={})
    assert info["driver"] is None and info["nccl"] == "2.26.2" and info["gpus_per_node"] == 3
    assert info["unavailable"] == {"driver": "pynvml is not installed (pip install 'recipelab[gpu]')"}


def test_a_cpu_run_on_a_gpu_machine_lists_no_gpus(two_h100s_and_a_gb10: ModuleType) -> None:
    info = cluster_info(2, torch.device("cpu"), env={})
    assert info["gpus"] is None and info["gpus_per_node"] is None and info["cudnn"] == "9.1.0"
    unavailable = info["unavailable"]
    assert isinstance(unavailable, dict)
    assert unavailable["gpus"] == "the run is on the cpu, not on a GPU"
