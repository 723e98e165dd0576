"""The command line's sweep values, parsed before anything runs, each error naming what to
type instead."""

from __future__ import annotations

import re

from recipelab.envelope.points import PRECISIONS
from recipelab.recipe import Precision
from recipelab.units import GIB, KIB, MIB

SIZE_UNITS = {"": 1, "b": 1, "k": KIB, "kib": KIB, "m": MIB, "mib": MIB, "g": GIB,
              "gib": GIB}


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    """``"2,4,8"`` as ``(2, 4, 8)``; anything else is an error naming ``option``."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{option} takes comma-separated whole numbers such as 2,4,8; "
                         f"got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{option} needs positive whole numbers such as 2,4,8; got {text!r}")
    return values


def parse_precisions(text: str) -> tuple[Precision, ...]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in PRECISIONS]
    if unknown or not names:
        raise ValueError(f"--precision takes a comma-separated list of {', '.join(PRECISIONS)}; "
                         f"got {text!r}")
    chosen: list[Precision] = [p for name in dict.fromkeys(names) for p in PRECISIONS if p == name]
    return tuple(chosen)  # in the user's order: gains are relative to the first


def parse_bytes(text: str) -> int:
    """``"6GiB"``, ``"512MiB"`` or a plain number of bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in SIZE_UNITS:
        raise ValueError(f"--memory-limit takes a size such as 6GiB, 512MiB or a number of "
                         f"bytes; got {text!r}")
    return int(float(match.group(1)) * SIZE_UNITS[unit])
