"""Deterministic text for the data and tokenizer tests: words of 1- to 4-byte UTF-8."""

from __future__ import annotations

import random

WORDS = ["alpha", "beta", "gamma", "recipe", "proxy", "loss", "café", "naïve", "über",
         "λόγος", "日本語", "データ", "🙂", "x = 1", "def f():"]
ASCII_WORDS = [w for w in WORDS if w.isascii()]


def prose(lines: int, seed: int = 0, words: list[str] = WORDS) -> str:
    """Deterministic multi-line text; mixes 1- to 4-byte UTF-8 characters by default."""
    rng = random.Random(seed)
    return "".join(
        " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n"
        for _ in range(lines)
    )
