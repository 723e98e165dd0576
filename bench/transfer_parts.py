"""Where the prediction from the wider model misses, and whether a second budget would mend it.

``bench/transfer.py`` trains the recommendation at the target and, beside it, at the width
rung's two sizes (the proxy's width and twice it) at the target's tokens and at the top
rung's. This reads such a run's ``--out`` and splits each campaign's miss, the target's
measured val_bpb less the prediction, into four parts that sum to it exactly:

- ``data``: how much further the proxy's width fell from the top rung's tokens to the
  target's than the ladder's horizons (the proxy's context, its stress rate) say;
- ``wider``: how much further twice the width fell than the proxy's width did (the gap between
  the widths grew with the tokens, which Chinchilla's additive form holds fixed);
- ``size``: the target below twice the width at the target's tokens, against the law's
  lowering from the gap measured at the top rung's tokens;
- ``level``: the bench's twice-the-width run at the top rung's tokens (the export's rate)
  against the width rung's level (its rate family's best).

It prints, too, how the best rate falls with the size at each step: between the width rung's
two widths (their rate families at the top rung's tokens), and between twice the width and the
target (the bench's sweeps at the target's tokens), beside the exponent the export used.

Then it trains both widths once more, at the ladder's horizon below the top (cached in each
campaign's ``runs``), and prints what a data term measured at each width would predict at the
target's tokens: the horizons' curve scaled to each width's fall between its two budgets, and
a straight line in log tokens through them.

    python bench/transfer_parts.py [--out bench-transfer] [--parallel 2]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import transfer
from recipelab.transfer.prediction import Prediction


def miss_parts(prediction: Prediction, ladder: dict[str, list[list[float]]], tokens_ratio: float
               ) -> dict[str, float]:
    """The target's miss (measured − predicted) at ``tokens_ratio`` × the top rung's tokens,
    split as the module says."""
    assert prediction.wide and prediction.horizons and prediction.measured_size and prediction.size
    (_, narrow), (_, wide), (_, target) = ladder["measured"]
    (_, narrow_top), (_, wide_top) = ladder["at_top"]
    top = prediction.wide.bytes_seen
    fall = prediction.horizons.change(top, top * tokens_ratio)
    gap = prediction.measured_size
    lowering = gap.lowering(prediction.wide.params, prediction.size.target_params)
    return {"miss": target - prediction.center(top * tokens_ratio),
            "data": (narrow - narrow_top) - fall,
            "wider": (wide - wide_top) - (narrow - narrow_top),
            "size": (target - wide) + lowering,
            "level": wide_top - prediction.wide.val_bpb}


def second_budget(prediction: Prediction, ladder: dict[str, list[list[float]]],
                  low: tuple[float, float], low_bytes: float, tokens_ratio: float
                  ) -> dict[str, float]:
    """The target predicted from each width's own data term: measured at ``low_bytes`` and at
    the top rung's tokens, carried to the target's as the horizons' curve scaled to that fall
    (``scaled``) or as a straight line in log tokens (``log_linear``); each width's own
    prediction beside its measurement."""
    assert prediction.wide and prediction.horizons
    top = prediction.wide.bytes_seen
    end = top * tokens_ratio
    change = prediction.horizons.change
    out: dict[str, float] = {}
    for name, at_low, (_, measured), (_, at_top) in zip(
            ("narrow", "wide"), low, ladder["measured"][:2], ladder["at_top"], strict=True):
        out[f"{name}_scale"] = (at_low - at_top) / change(top, low_bytes)
        out[f"{name}_slope"] = (at_top - at_low) / math.log(top / low_bytes)
        out[f"{name}_scaled"] = at_top + out[f"{name}_scale"] * change(top, end) - measured
        out[f"{name}_log_linear"] = at_top + out[f"{name}_slope"] * math.log(end / top) - measured
    # the prediction with its data term (the horizons' change from the top) replaced
    elsewhere = prediction.center(end) - change(top, end)
    out["scaled"] = elsewhere + out["wide_scale"] * change(top, end)
    out["log_linear"] = elsewhere + out["wide_slope"] * math.log(end / top)
    return out


def rate_steps(row: dict[str, Any], target_params: int) -> str | None:
    """The best rate's exponent in the size between the rung's widths, and between twice the
    width and the target; None where a sweep has fewer than 3 rates (its best is an edge)."""
    exponent = row.get("size_exponent") or {}
    rung = exponent.get("measured")
    wider = row["twice_the_proxy_width"]
    if not rung or len(row["sweep"]) < 3 or len(wider["sweep"]) < 3:
        return None
    beyond = (math.log(row["best_lr"] / wider["best_lr"])
              / math.log(target_params / rung["wide"]["params"]))
    return (f"the best rate ∝ N^{rung['exponent']:.2f} between the rung's widths, "
            f"N^{beyond:.2f} from twice the width to the target; the export used "
            f"N^{exponent['exponent']:.2f}, {row['exported_lr'] / row['best_lr']:.2f}× the "
            "target's best")


def widths(out: Path) -> list[str]:
    """The width rung's two models as bench/transfer.py wrote them, the proxy's width first."""
    return sorted((path.stem for path in out.glob("width-*.json")),
                  key=lambda stem: int(stem.split("-")[1]))


def report(name: str, prediction: Prediction, ladder: dict[str, list[list[float]]],
           low: tuple[float, float], low_bytes: float, ratio: float, rate: str | None) -> None:
    assert prediction.wide is not None
    top = prediction.wide.bytes_seen
    measured = ladder["measured"][-1][1]
    parts = miss_parts(prediction, ladder, ratio)
    other = second_budget(prediction, ladder, low, low_bytes, ratio)
    print(f"  {name}: miss {parts['miss']:+.3f} = data {parts['data']:+.3f} + wider "
          f"{parts['wider']:+.3f} + size {parts['size']:+.3f} + level {parts['level']:+.3f}")
    print(f"    each width from {low_bytes:,.0f} and {top:,.0f} bytes: "
          f"{other['narrow_scale']:.2f} / {other['wide_scale']:.2f} × the horizons' fall; its "
          f"own miss at the target's tokens {other['narrow_scaled']:+.3f} / "
          f"{other['wide_scaled']:+.3f} scaled, {other['narrow_log_linear']:+.3f} / "
          f"{other['wide_log_linear']:+.3f} log-linear (predicted − measured)")
    print(f"    the target {measured:.4f}: predicted {prediction.center(top * ratio):.4f} now "
          f"({-parts['miss'] / measured:+.1%}); from the wider model's own data term "
          f"{other['scaled']:.4f} scaled ({(other['scaled'] - measured) / measured:+.1%}), "
          f"{other['log_linear']:.4f} log-linear "
          f"({(other['log_linear'] - measured) / measured:+.1%})")
    if rate is not None:
        print(f"    rate: {rate}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-transfer"),
                        help="a finished bench/transfer.py run's --out")
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    if args.parallel < 1:
        parser.error(f"--parallel {args.parallel} trains nothing: it must be at least 1")
    summary_path = args.out / "summary.json"
    if not summary_path.exists():
        parser.error(f"{summary_path} does not exist: run bench/transfer.py --out {args.out} "
                     "first (this reads its campaigns and arms)")
    summary = json.loads(summary_path.read_text())
    seeds = len(summary["law"]["val_bpb"])
    names = widths(args.out)
    cases = []
    jobs = []
    for row in summary["campaigns"]:
        where = args.out / row["campaign"]
        prediction = Prediction.from_json(
            json.loads((where / "export-recommended" / "prediction.json").read_text()))
        if not prediction.from_wide or prediction.horizons is None or "width_ladder" not in row:
            print(f"{row['campaign']}: its prediction does not start from the wider model")
            continue
        low_bytes = prediction.horizons.points[-2][0]
        target = Path(json.loads((where / "settings.json").read_text())["target"])
        for name in names:
            exported = transfer.export(where, round(low_bytes), target,
                                       target=args.out / f"{name}.json", name=f"export-{name}-low")
            jobs += [(transfer.Arm(f"{name}-low", exported / "recipe.json", s), where / "runs")
                     for s in range(seeds)]
        cases.append((row, where, prediction, low_bytes))
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda job: transfer.pretrain(job[0], job[1], summary["corpus"]), jobs))
    print(f"\n{summary['corpus']}: the miss at the target (measured − predicted, val_bpb), "
          "in parts")
    for row, where, prediction, low_bytes in cases:
        assert prediction.wide is not None
        narrow, wide = (statistics.mean(transfer.final(where / "runs" / f"{name}-low-s{s}")
                                        for s in range(seeds)) for name in names)
        report(row["campaign"], prediction, row["width_ladder"], (narrow, wide), low_bytes,
               summary["tokens"] / prediction.wide.bytes_seen,
               rate_steps(row, row["width_ladder"]["measured"][-1][0]))


if __name__ == "__main__":
    main()
