"""The file-system contract between the campaign directory and where a trial trains.

A trial reads one input file, ``spec.json``, and writes ``result.json``, ``trial.log`` and,
for stress runs, ``checkpoint/`` (see :mod:`recipelab.trainer.checkpoint`). Where the
worker sees the campaign directory (this machine, or a shared file system) it trains in
place. Where it cannot, it trains in a scratch directory, and the files travel:

- to the worker: the spec, and the latest checkpoint when the trial resumes;
- back: every checkpoint as soon as it is complete (so a worker lost mid-run costs only
  the steps since its last checkpoint), then the result and the log when the trial ends.

A checkpoint travels as ``{relative path: bytes}`` of its newest step directory plus the
``latest`` pointer, and is unpacked in the trainer's own order: the step directory first,
then the pointer, atomically, so a crash mid-unpack leaves the previous checkpoint usable.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from recipelab.fsutil import atomic_write_bytes, atomic_write_text
from recipelab.trainer.spec import CHECKPOINT_LATEST as LATEST

Packed = dict[str, bytes]
NODE_FILE = "node.txt"
"""In a trial's home folder: the cluster node its task said it runs on, written as soon as the
orchestrator hears it, so a campaign resumed after its orchestrator died still knows where the
trial it lost was training."""


def latest_step(checkpoint_dir: Path) -> str | None:
    """The name of the newest complete checkpoint in ``checkpoint_dir``, if any."""
    try:
        return (checkpoint_dir / LATEST).read_text().strip() or None
    except OSError:
        return None


def pack_checkpoint(checkpoint_dir: Path) -> Packed | None:
    """The newest checkpoint as ``{relative path: bytes}``; None when there is none."""
    step = latest_step(checkpoint_dir)
    if step is None or not (checkpoint_dir / step).is_dir():
        return None
    files = {f"{step}/{path.name}": path.read_bytes()
             for path in sorted((checkpoint_dir / step).iterdir()) if path.is_file()}
    return {**files, LATEST: step.encode()}


def unpack_checkpoint(checkpoint_dir: Path, packed: Packed) -> None:
    """Install a packed checkpoint as the newest one in ``checkpoint_dir``."""
    step = packed[LATEST].decode()
    target = checkpoint_dir / step
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name, data in packed.items():
        if name != LATEST:
            atomic_write_bytes(checkpoint_dir / name, data)
    atomic_write_text(checkpoint_dir / LATEST, step)
    for old in checkpoint_dir.glob("step-*"):
        if old.name != step:
            shutil.rmtree(old, ignore_errors=True)


def write_node(out_dir: Path, node: str) -> None:
    """Keep the node a trial's task runs on in its home folder (see :data:`NODE_FILE`)."""
    atomic_write_text(out_dir / NODE_FILE, node)


def read_node(out_dir: Path) -> str | None:
    """The node :func:`write_node` kept for the trial in ``out_dir``; None when none did."""
    try:
        return (out_dir / NODE_FILE).read_text().strip() or None
    except OSError:
        return None
