"""Finding and killing a campaign's processes the way a user (or the kernel) would."""

from __future__ import annotations

import os
import signal

import psutil


def trainer_children(pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "recipelab.trainer" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # exited (or a zombie) while we looked
            continue
    return found


def open_paths(process: psutil.Process) -> set[str]:
    try:
        return {f.path for f in process.open_files()}
    except psutil.Error:
        return set()


def kill_orchestrator(pid: int) -> None:
    """SIGKILL the orchestrator; its trainer workers must not outlive it.

    The bound is generous because a spare worker still importing under ``SCHED_IDLE`` gets
    the CPU to act on its SIGKILL only when nothing else wants it, which on a loaded machine
    can take many seconds.
    """
    children = trainer_children(pid)
    os.kill(pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(children, timeout=120)
    assert not alive, "trainer workers outlived their orchestrator"
