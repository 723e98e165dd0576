"""The sweep's axes as typed (:mod:`recipelab.envelope.values`): parsed, or refused with an
example of what to type."""

from __future__ import annotations

import pytest

from recipelab.envelope import parse_bytes, parse_ints, parse_precisions


def test_sweep_values_parse_or_explain() -> None:
    assert parse_ints("2, 4,8", "--batch") == (2, 4, 8)
    with pytest.raises(ValueError, match="positive"):
        parse_ints("0,4", "--batch")
    assert parse_precisions("bf16,fp32") == ("bf16", "fp32"), "the user's order sets the reference"
    with pytest.raises(ValueError, match="fp32, bf16, fp8"):
        parse_precisions("fp16")
    assert parse_bytes("6GiB") == 6 * 2**30 and parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1000") == 1000
    with pytest.raises(ValueError, match="6GiB"):
        parse_bytes("six gigs")
