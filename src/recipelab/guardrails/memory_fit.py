"""The measured memory model: peak memory = a x tokens + b, fitted per device and family.

The analytic model in :mod:`recipelab.guardrails.memory` has to guess allocator slack,
framework overhead and kernel workspaces. Measured peaks need no guess: at a fixed shape and
precision, peak memory is a straight line in the tokens of one micro-batch
(``batch_size * seq_len``; gradient accumulation frees activations between micro-batches).
The slope is the activation and logit memory per token, the intercept the model, its
optimizer state and the process. ``recipelab envelope`` fits that line from its sweep and
every campaign adds the peaks it measures, so the guardrail predicts an OOM without trying.

A *family* is what shape and precision determine: the recipe without its batch, sequence,
step, seed, optimizer and schedule knobs. Fits are kept per device (kind, name, memory) and
family in one JSON file, ``memory-model.json`` under ``$RECIPELAB_CACHE`` (default
``~/.cache/recipelab``); ``$RECIPELAB_MEMORY_MODEL`` names another file.

The guardrail never reads that file: whoever judges candidates (a campaign, the preflight)
reads it with :func:`read_for_guardrail` and hands the model over in the
:class:`~recipelab.guardrails.base.GuardContext`, so a check's every input is in its
arguments.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pydantic import Field, ValidationError

from recipelab import environment
from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text
from recipelab.guardrails.base import DeviceInfo
from recipelab.recipe import Recipe, StrictModel
from recipelab.units import KIB, MIB

MEMORY_MODEL_FILE = "memory-model.json"
MAX_POINTS = 256
"""Points kept per fit, the most recent: enough for any sweep plus a few campaigns."""



class MemoryModelError(RecipelabError):
    """The memory-model file exists but cannot be used; it is left untouched."""


def memory_model_path() -> Path:
    explicit = environment.read(environment.MEMORY_MODEL)
    return Path(explicit).expanduser() if explicit else environment.cache_dir() / MEMORY_MODEL_FILE


def micro_batch_tokens(recipe: Recipe) -> int:
    """The x of the line: tokens whose activations are alive at once."""
    return recipe.batch_size * recipe.seq_len


def recipe_family(recipe: Recipe) -> str:
    """A stable hash of what, besides the batch geometry, sets a trial's peak memory."""
    kept = {"shape": recipe.shape.model_dump(mode="json"), "precision": recipe.precision,
            "tokenizer": recipe.tokenizer}
    canonical = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def device_key(device: DeviceInfo) -> str:
    return f"{device.kind}:{device.name}:{device.memory_bytes}"


# --- the line ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearFit:
    """``peak_bytes = a_bytes_per_token * tokens + b_bytes``."""

    a_bytes_per_token: float
    b_bytes: float
    points: int

    def predict(self, tokens: int) -> int:
        return round(self.a_bytes_per_token * tokens + self.b_bytes)

    def describe(self) -> str:
        return (f"{self.a_bytes_per_token / KIB:.2f} KiB per token + {self.b_bytes / MIB:,.0f} MiB, "
                f"from {self.points} measured points")


def fit_line(points: Sequence[tuple[int, int]]) -> LinearFit | None:
    """Least squares through ``(tokens, peak_bytes)``; None without two distinct token counts."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return LinearFit(slope, mean_y - slope * mean_x, n)


def held_out_errors(points: Sequence[tuple[int, int]]) -> list[float]:
    """Leave-one-out relative errors: each point predicted by the line through the others.

    Empty when fewer than three distinct token counts leave nothing to hold out.
    """
    errors = []
    for index, (x, y) in enumerate(points):
        rest = [p for i, p in enumerate(points) if i != index]
        fit = fit_line(rest)
        if fit is not None and y > 0:
            errors.append(abs(fit.predict(x) - y) / y)
    return errors


# --- the file ---------------------------------------------------------------------------------


class Machine(StrictModel):
    kind: str
    name: str
    memory_bytes: int
    host: str


class FamilyFit(StrictModel):
    """One device's line for one family, with the points it was fitted to."""

    machine: Machine
    family: str
    shape: dict[str, object]
    precision: str
    points: list[tuple[int, int]] = Field(default_factory=list)
    a_bytes_per_token: float | None = None
    b_bytes: float | None = None
    updated_at: str = ""

    def line(self) -> LinearFit | None:
        if self.a_bytes_per_token is None or self.b_bytes is None or self.a_bytes_per_token <= 0:
            return None  # no line yet, or noise that cannot be extrapolated
        return LinearFit(self.a_bytes_per_token, self.b_bytes, len(self.points))


class MemoryModel(StrictModel):
    version: int = 1
    fits: dict[str, FamilyFit] = Field(default_factory=dict)


def fit_key(device: DeviceInfo, family: str) -> str:
    return f"{device_key(device)}/{family}"


def load_memory_model(path: Path | None = None) -> MemoryModel:
    """The saved fits (none when the file does not exist yet)."""
    path = path or memory_model_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return MemoryModel()
    except OSError as error:
        raise MemoryModelError(f"cannot read the memory model {path}: {error.strerror}") from None
    try:
        return MemoryModel.model_validate_json(text)
    except ValidationError as error:
        raise MemoryModelError(
            f"the memory model {path} is not valid ({error.error_count()} problems, first: "
            f"{error.errors()[0]['msg']}); move it aside and run 'recipelab envelope' again"
        ) from None


def read_for_guardrail(path: Path | None = None) -> tuple[MemoryModel | None, str | None]:
    """The memory model for a :class:`~recipelab.guardrails.base.GuardContext`, and None;
    or, when the file is unusable, None and why (the guardrail then says so and falls back to
    the analytic model)."""
    try:
        return load_memory_model(path), None
    except MemoryModelError as error:
        return None, str(error)


def fitted_line(model: MemoryModel, recipe: Recipe, device: DeviceInfo) -> LinearFit | None:
    """This device's fitted line for ``recipe``'s family in ``model``, if one was measured."""
    entry = model.fits.get(fit_key(device, recipe_family(recipe)))
    return entry.line() if entry is not None else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialize read-modify-write of the file between a sweep and running campaigns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record_peaks(recipe: Recipe, device: DeviceInfo, peaks: Sequence[tuple[int, int]],
                 path: Path | None = None) -> MemoryModel:
    """Add measured ``(tokens, peak_bytes)`` of ``recipe``'s family on ``device``, refit, and
    return the whole model as written (other processes' fits included).

    Raises :class:`MemoryModelError` (and writes nothing) when the existing file is unusable.
    """
    path = path or memory_model_path()
    family = recipe_family(recipe)
    key = fit_key(device, family)
    with _locked(path):
        model = load_memory_model(path)
        entry = model.fits.get(key) or FamilyFit(
            machine=Machine(kind=device.kind, name=device.name, memory_bytes=device.memory_bytes,
                            host=socket.gethostname()),
            family=family, shape=recipe.shape.model_dump(mode="json"), precision=recipe.precision)
        points = [*entry.points, *((int(x), int(y)) for x, y in peaks if y > 0)][-MAX_POINTS:]
        line = fit_line(points)
        entry = entry.model_copy(update={
            "points": points, "updated_at": datetime.now(timezone.utc).isoformat(),
            "a_bytes_per_token": line.a_bytes_per_token if line else None,
            "b_bytes": line.b_bytes if line else None})
        model = MemoryModel(fits={**model.fits, key: entry})
        atomic_write_text(path, model.model_dump_json(indent=2))
    return model
