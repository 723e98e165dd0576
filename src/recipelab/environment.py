"""Every environment variable recipelab reads, named and read here and nowhere else.

A setting given by the environment is a setting like any other; reading them in one module
makes the list complete (``recipelab --help`` and the README point here) and keeps one rule
for all of them: an unset or blank variable is absent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CACHE = "RECIPELAB_CACHE"  # tokenized corpora, compile caches, the memory model
MEMORY_MODEL = "RECIPELAB_MEMORY_MODEL"  # the memory model file (default: in CACHE)
LLM_BASE_URL = "RECIPELAB_LLM_BASE_URL"  # an OpenAI-compatible endpoint turns the LLM on
LLM_MODEL = "RECIPELAB_LLM_MODEL"
LLM_API_KEYS = ("RECIPELAB_LLM_API_KEY", "OPENAI_API_KEY")  # the first that is set
SECRETS = (*LLM_API_KEYS, "NGC_API_KEY", "PGPASSWORD")  # scrubbed from every log line
LAUNCHER_PID = "RECIPELAB_LAUNCHER_PID"  # the process a trainer must die with
PARALLEL_ON_DEVICE = "RECIPELAB_PARALLEL_ON_DEVICE"  # trials an executor runs on one GPU at once
KEEP_FREED_MEMORY = "RECIPELAB_KEEP_FREED_MEMORY"  # 0 or off: leave glibc's malloc at its defaults
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
TORCH_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}

DEFAULT_CACHE = Path("~/.cache/recipelab")


def read(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value without surrounding blanks; None when unset or blank."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def cache_dir() -> Path:
    """Where recipelab keeps what it can rebuild: ``$RECIPELAB_CACHE``, else ~/.cache/recipelab."""
    return Path(read(CACHE) or DEFAULT_CACHE).expanduser()


def secrets(min_chars: int = 4) -> list[str]:
    """The values of the secret variables that are set (long enough not to match by chance)."""
    return [value for name in SECRETS if (value := read(name)) and len(value) >= min_chars]
