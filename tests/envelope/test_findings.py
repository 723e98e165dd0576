"""What a sweep finds (:mod:`recipelab.envelope.findings`): where throughput plateaus, and
each precision's gain at the same geometry."""

from __future__ import annotations

from recipelab.envelope import EnvelopePoint, plateau_tokens, with_gains


def point(tokens: int, tokens_per_s: float | None, precision: str = "fp32",
          status: str = "complete") -> EnvelopePoint:
    return EnvelopePoint.model_validate({
        "precision": precision, "batch_size": tokens // 64, "seq_len": 64,
        "tokens_per_step": tokens, "status": status, "tokens_per_s": tokens_per_s})


def test_throughput_plateaus_where_no_later_point_gains_5_percent() -> None:
    rising_then_flat = [point(128, 1000), point(256, 1800), point(512, 2000), point(1024, 2050),
                        point(2048, 2080)]
    assert plateau_tokens(rising_then_flat) == 512
    assert plateau_tokens([point(128, 1000), point(256, 2000), point(512, 4000)]) is None
    dips_then_recovers = [point(128, 1000), point(256, 1500), point(512, 1200), point(1024, 1700)]
    assert plateau_tokens(dips_then_recovers) is None
    with_oom = [point(128, 1000), point(256, 1020), point(512, None, status="oom")]
    assert plateau_tokens(with_oom) == 128


def test_each_precision_gains_relative_to_the_first_at_the_same_geometry() -> None:
    points = with_gains([point(256, 1000, "bf16"), point(256, 1600, "fp8"),
                         point(512, None, "bf16", status="oom"), point(512, 3000, "fp8")],
                        ["bf16", "fp8"])
    assert [p.gain for p in points] == [1.0, 1.6, None, None]
