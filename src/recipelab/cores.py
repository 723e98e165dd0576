"""The one count of this machine's cores that every ``auto`` shares.

``--parallel auto``, a trial's threads, a DDP rank's threads on a CPU and the tokenizer's
workers all divide the same cores. Counted apart they disagreed: ``os.cpu_count()`` counts
every logical CPU of the machine, ignoring an affinity mask (taskset, a container's cpuset),
so on a hyper-threaded or pinned machine threads were handed out for cores the process may
not use.
"""

from __future__ import annotations

import os

import psutil


def allowed_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def usable_cores() -> int:
    """Physical cores this process may run on: SMT siblings share one core's matmul units,
    so they add little to a proxy's step, and an affinity mask leaves fewer than the machine
    has."""
    logical = allowed_cpus()
    physical = psutil.cpu_count(logical=False) or logical
    total = psutil.cpu_count(logical=True) or logical
    per_core = max(1, total // physical)  # hardware threads per core
    return max(1, logical // per_core)
