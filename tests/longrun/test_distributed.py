"""The collective rule, checked on a CPU: NCCL communicates CUDA tensors only, so every
collective the long run makes must hold its tensor on the backend's device. A gloo test
cannot see that rule, so NCCL is stood in for by a function that applies it (there is no
NCCL here) while FakeTensorMode makes CUDA tensors without a GPU."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed
from torch._subclasses.fake_tensor import FakeTensorMode

import recipelab.longrun
from recipelab.longrun.distributed import (
    CollectiveOnWrongDevice,
    Collectives,
    World,
    check_collective_tensor,
)

TWO = World(rank=0, size=2, local_rank=0, local_size=2)


class Reached(Exception):
    """The stand-in for NCCL was called with a tensor it accepts."""


def nccl_stand_in(tensor: torch.Tensor, *args: object, **kwargs: object) -> None:
    if tensor.device.type != "cuda":
        raise RuntimeError("NCCL: no backend type associated with device type cpu")
    raise Reached(str(tensor.device))


@pytest.fixture
def nccl(monkeypatch: pytest.MonkeyPatch) -> Collectives:
    monkeypatch.setattr(torch.distributed, "all_reduce", nccl_stand_in)
    monkeypatch.setattr(torch.distributed, "broadcast", nccl_stand_in)
    return Collectives(TWO, "nccl", torch.device("cuda", 0))


def test_nccl_takes_cuda_tensors_only_and_gloo_cpu_tensors() -> None:
    with pytest.raises(CollectiveOnWrongDevice, match="nccl communicates cuda tensors only"):
        check_collective_tensor(torch.zeros(1), "nccl")
    check_collective_tensor(torch.zeros(1), "gloo")
    with FakeTensorMode():
        check_collective_tensor(torch.zeros(1, device="cuda"), "nccl")
        with pytest.raises(CollectiveOnWrongDevice, match="gloo"):
            check_collective_tensor(torch.zeros(1, device="cuda"), "gloo")


def test_the_stop_decision_is_made_on_the_backends_device(nccl: Collectives) -> None:
    with FakeTensorMode(), pytest.raises(Reached, match="cuda:0"):
        nccl.agree(2)


def test_sums_and_means_take_the_tensor_the_backend_can_communicate(nccl: Collectives) -> None:
    with FakeTensorMode():
        for reduce in (nccl.sum, nccl.mean):
            with pytest.raises(Reached):
                reduce(torch.zeros(3, device="cuda:0"))
    for reduce in (nccl.sum, nccl.mean):  # refused before the library sees it
        with pytest.raises(CollectiveOnWrongDevice):
            reduce(torch.zeros(3))


def test_one_process_makes_no_collective_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.distributed, "all_reduce", nccl_stand_in)
    alone = Collectives(World(), None, torch.device("cpu"))
    assert alone.agree(3) == 3 and float(alone.mean(torch.ones(()))) == 1.0


def test_only_the_distributed_module_calls_torch_distributed() -> None:
    """Every collective of the long run goes through :class:`Collectives`, so the rule above
    covers them all."""
    package = Path(recipelab.longrun.__file__).parent
    callers = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "dist"):
                callers.add(path.name)
    assert callers <= {"distributed.py"}


def test_a_rank_leaves_with_its_status_and_its_output_but_without_the_finalizer() -> None:
    """A finalizing interpreter is where gloo's late frees abort a rank that completed."""
    script = ("import atexit, sys\n"
              "from recipelab.longrun.distributed import exit_rank\n"
              "atexit.register(lambda: print('finalized'))\n"
              "print('written', end='')\n"
              "sys.stderr.write('said')\n"
              "exit_rank(3)\n")
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=buffered, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (3, "written", "said")
