"""The morning report's sections, built from a campaign's records.

Every section is present in every report: when a campaign is unfinished (no stress runs
yet, no telemetry, too few trials for importance) the section says what is missing and
how to get it, instead of disappearing.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from recipelab.ratio import gain_stderr
from recipelab.recipe import BASELINE_PROPOSER
from recipelab.report import plots
from recipelab.report.context import LiveStatus, ReportContext
from recipelab.report.document import Block, Bullets, Document, Image, Paragraph, Section, Table
from recipelab.report.recommend import SECONDS_PER_DAY, CloudRunPlan, recommend
from recipelab.report.why import baseline_knobs, why_this_recipe
from recipelab.text import compact_edit
from recipelab.trajectory.analysis import knob_importance, scored_proxies, spearman
from recipelab.trajectory.horizon import HorizonFit, horizon_rule
from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER, Ledger
from recipelab.trajectory.noise import NoiseFloor
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.width_check import width_check
from recipelab.transfer.distance import distance_lines, load_verified
from recipelab.transfer.export import Exported, ExportOptions, recommended_export
from recipelab.transfer.prediction import bytes_per_token, predict
from recipelab.units import MIB

TOP_N = 10


def _fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _about(value: float) -> str:
    """Three significant figures, with thousands separators once it is that large."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def _stress_of(records: Sequence[TrialRecord]) -> dict[str, TrialRecord]:
    """Each proxy trial's latest terminal stress run."""
    found: dict[str, TrialRecord] = {}
    for record in records:
        if record.kind == "stress" and record.parent and record.trained:
            found[record.parent] = record
    return found


def summary(ledger: Ledger, ctx: ReportContext) -> Section:
    records, noise = ledger.records, ledger.noise
    counts = Counter(r.status for r in ledger.proxies)
    items = [f"target: {ctx.target.name} ({ctx.target.params:,} parameters); proxy preset: {ctx.preset}",
             "proxy trials: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none yet"),
             f"rung runs: {sum(r.kind == 'rung' and r.is_terminal for r in records)}",
             f"top-rung (stress) runs: {sum(r.kind == 'stress' and r.is_terminal for r in records)}"]
    best = ledger.best
    if best is not None:
        items[:0] = [ledger.winner_line(),  # the same line as the console and status
                     f"next: 'recipelab export {ctx.campaign} --out cloud/ --target "
                     f"{ctx.target.name}' writes the cloud run's recipe and its prediction"]
        gain = ledger.proxy_gain(best)
        items.append(f"best proxy trial: {best.trial_id} val_bpb {_fmt(best.val_bpb)}"
                     + (f", gain {gain.describe()}" if gain is not None else "")
                     + f" ({best.proposer}: {compact_edit(best.edit, baseline_knobs(records))})")
    if noise is not None:
        items.append(noise.summary())
    else:
        items.append("noise floor: not measured (the baseline has fewer than two seeds)")
    items.append(eval_error(ledger, noise))
    trials = ledger.counts()
    if trials.llm_asked:
        items.append(trials.llm_line())
    return Section("Summary", (Bullets(tuple(items)),))


def eval_error(ledger: Ledger, noise: NoiseFloor | None) -> str:
    """The evaluation slice's sampling error beside the noise floor, two ways: of val_bpb as
    an estimate over all text (what a prediction of an absolute score carries), and of a gain
    over the baseline (what a ranking carries: much of the first is shared by every trial on
    the slice and cancels). The slice is large enough when a gain's error is small next to the
    floor, or when it is the whole validation text already."""
    complete = [r for r in ledger.records if r.kind == "proxy" and r.status == "complete"]
    errors = sorted(e for r in complete if (e := r.measured.val_bpb_stderr) is not None)
    if not errors:
        return ("evaluation slice: its sampling error of val_bpb was not recorded (trials of an "
                "older recipelab)")
    blocks = [(r, b) for r in complete if (b := r.measured.eval_blocks)]
    whole = any(b.get("whole_text") for _, b in blocks)
    line = (f"evaluation slice{' (the whole validation text)' if whole else ''}: val_bpb's "
            f"sampling error is ±{_median(errors):.4f} (one standard error over the slice's "
            f"blocks, median of {len(errors)} trials)")
    gains = _gain_errors(ledger.baseline, blocks)
    if gains:
        line += f"; a gain's is ±{_median(gains):.4f} (paired with the baseline on the same blocks)"
    if noise is None or noise.floor <= 0 or not gains:
        return line
    ratio = _median(gains) / noise.floor
    verdict = ("negligible" if ratio <= 0.2 else "the whole validation text: no larger slice "
               "exists" if whole else "not negligible: a larger eval_bytes would narrow it")
    return f"{line}, {ratio:.0%} of the {noise.kind} noise floor ({noise.floor:.4f}): {verdict}"


def _median(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2]


def _gain_errors(baseline: TrialRecord | None,
                 blocks: Sequence[tuple[TrialRecord, dict[str, Any]]]) -> list[float]:
    """Each trial's gain's sampling error against the baseline, over the blocks both have."""
    if baseline is None:
        return []
    base = next((b for r, b in blocks if r.trial_id == baseline.trial_id), None)
    if base is None:
        return []
    return [e for r, b in blocks if r.trial_id != baseline.trial_id
            and (e := gain_stderr(base["nats"], base["bytes"], b["nats"], b["bytes"]))
            is not None]


def progress(records: Sequence[TrialRecord], noise: NoiseFloor | None) -> Section:
    if not scored_proxies(records):
        return Section("val_bpb by iteration", (Paragraph(
            "No proxy trial has completed yet: the plot appears once one has."),))
    return Section("val_bpb by iteration", (
        Paragraph("Each point is a proxy trial, coloured by the proposer that suggested it; the black "
                  "line is the best recipe so far at its mean over the seeds it has by then."),
        Image("val_bpb.png", plots.progress(records, noise), "val_bpb by iteration")))


def top_trials(ledger: Ledger) -> Section:
    records, noise = ledger.records, ledger.noise
    scored = ledger.ranked_at_proxy[:TOP_N]  # a seed re-run is its candidate's evidence, not a row
    if not scored:
        return Section("Top 10 proxy trials", (Paragraph("No proxy trial has completed yet."),))
    stress = _stress_of(records)
    base = baseline_knobs(records)
    rows = []
    for rank, r in enumerate(scored, start=1):
        assert r.val_bpb is not None
        gain = ledger.proxy_gain(r)
        mark = "" if gain is None else gain.describe()
        run = stress.get(r.trial_id)
        rows.append((str(rank), r.trial_id, _fmt(r.val_bpb), mark or "—", r.proposer,
                     compact_edit(r.edit, base), r.hypothesis, (run.verdict or run.status) if run else ""))
    blocks: list[Block] = [Table(("rank", "trial", "val_bpb", "gain vs baseline [90%]", "proposer",
                                  "edit", "hypothesis", "stress"), tuple(rows))]
    if noise is not None:
        blocks.append(Paragraph(
            "A gain is the baseline's val_bpb minus the trial's, at the same seeds (paired) when "
            "the noise floor is paired, averaged over every seed of the recipe (the count "
            "follows it); in brackets its 90% interval. `recipelab status` shows the same label. "
            "A gain whose interval contains 0 is within noise: no winner is named inside it. "
            "These are proxy-trial gains; the winner line's is the top rung's, over the tuned "
            f"baseline. Noise floor in use: {noise.kind}."))
    else:
        blocks.append(Paragraph("Gains are not marked: the noise floor needs the baseline trained with "
                                "at least two seeds."))
    return Section("Top 10 proxy trials", tuple(blocks))


def rung_runs(ledger: Ledger, horizon_fits: Sequence[HorizonFit] = ()) -> Section:
    """The ladder: for each rung (steps), the recipes that climbed to it, each run's val_bpb
    and its paired gain over the baseline at the same steps and seed, ranked as the rung
    ranked them (``excluded``: the run did not score)."""
    title = "The ladder of fidelities"
    records = ledger.records
    levels = sorted({r.budget_steps for r in (*ledger.ranking_runs, *ledger.stress)
                     if r.is_terminal})
    if not levels:
        return Section(title, (Paragraph(
            "No runs above the proxy yet: after the search the best candidates climb the ladder "
            "(successive halving: the best 1/--eta at each rung, the baseline beside them) up to "
            "the top rung at --stress-steps."),))
    rows = []
    for steps in levels:
        ranked = ledger.ranked_at(steps)
        rank = {r.trial_id: i for i, r in enumerate(ranked, start=1)}
        base = ledger.baseline
        climbed = [c for c in ledger.ranked_at_proxy if ledger.runs_at(c.trial_id, steps)]
        for candidate in climbed:
            scores = ledger.scores_at(candidate.trial_id, steps)
            gains = ledger.gains_at(candidate.trial_id, steps)
            is_base = base is not None and candidate.trial_id == base.trial_id
            gain = ("control" if is_base else "—" if not gains else
                    f"{statistics.fmean(gains.values()):+.4f}")
            runs = ledger.runs_at(candidate.trial_id, steps)
            rows.append((str(steps), f"{runs[0].steps} × {runs[0].tokens_per_step:,}",
                         candidate.trial_id, str(len(scores)),
                         _fmt(statistics.fmean(scores.values()) if scores else None), gain,
                         "baseline" if is_base else str(rank.get(candidate.trial_id, "excluded"))))
    family = [r for r in ledger.rung if r.proposer == LR_FAMILY_PROPOSER and r.is_terminal
              and base is not None and r.parent == base.trial_id]
    probes = [r for r in ledger.probes if r.is_terminal]
    finalists = sum(r.proposer == LR_FAMILY_PROPOSER and r.is_terminal and r not in family
                    and r not in probes for r in ledger.rung)
    carried = [c.trial_id for c in ledger.contenders if ledger.at_proxy_steps(c)[1] != 1.0
               and any(ledger.runs_at(c.trial_id, s) for s in ledger.rung_levels)]
    blocks: list[Block] = [
        Paragraph("Each rung trains the best of the rung below for more tokens, and the "
                  "baseline beside them as the control; a rung ranks by the paired gain over the "
                  "baseline at the same tokens and seed. A rung's budget is the tokens of the "
                  "baseline's steps: a recipe with a larger batch trains fewer steps of it. The "
                  "top rung trains each finalist and the baseline at two or more seeds. A run "
                  "that did not complete, or whose loss ended above where it began, is "
                  "excluded."),
        Table(("rung (baseline steps)", "steps × tokens per step", "trial", "seeds", "val_bpb",
               "gain vs baseline", "rank"), tuple(rows))]
    rule = horizon_rule(records, horizon_fits)
    blocks.append(Paragraph(
        f"Each rung trains at the proxy's learning rate × (rung tokens / proxy tokens)^-alpha, "
        f"the horizon rule: {rule.describe()}. {len(family)} learning-rate family run(s) (the "
        "baseline at lr × ½ and × 2 at each budget) fed it; they rank nothing."
        + (f" At the top rung the finalists also trained at lr × ½ and × 2 ({finalists} "
           "run(s)): each competes at its best rate, as the tuned baseline does."
           if finalists else "")))
    if probes:
        multiples = " and × ".join(f"{m:g}" for m in sorted({float(r.edit["lr_family"])
                                                             for r in probes}))
        blocks.append(Paragraph(
            f"{len(probes)} probe(s) trained candidates again at the proxy's steps at lr × "
            f"{multiples}: above, the rate the rule would choose there were a candidate's own "
            "right for the top rung; below, by as much, for a rate too hot already there. The "
            "first rung took the best by each one's best of its proxy and its probes, and a "
            "climber whose probe ranked it carries the probe's multiple of the rule's rate up "
            "the ladder. "
            + (f"Climbed by its probe: {', '.join(carried)}." if carried else
               "No candidate climbed by its probe.")))
    return Section(title, tuple(blocks))


def _lr(record: TrialRecord | None) -> float | None:
    """The record's learning rate, or None for a record without one."""
    lr = (record.recipe.get("optimizer") or {}).get("lr") if record is not None else None
    return float(lr) if lr is not None else None


def stress_runs(records: Sequence[TrialRecord]) -> Section:
    runs = [r for r in records if r.kind == "stress" and r.is_terminal]
    if not runs:
        return Section("Stress runs", (Paragraph(
            "No stress runs yet: finalists are stress-run when the proxy search ends "
            "(or now, with 'recipelab stress CAMPAIGN')."),))
    by_id = {r.trial_id: r for r in records}
    rows = []
    scaled = False
    for r in runs:
        losses = [float(p["loss"]) for p in r.curve]
        lr, parent_lr = _lr(r), _lr(by_id.get(r.parent or ""))
        factor = lr / parent_lr if lr is not None and parent_lr else 1.0
        scaled = scaled or not math.isclose(factor, 1.0)
        rate = ("—" if lr is None else f"{lr:.3g}"
                + ("" if math.isclose(factor, 1.0) else f" (proxy's x {factor:.3g})"))
        rows.append((r.trial_id, r.parent or "", r.status, r.verdict or "—", rate,
                     _fmt(losses[-1] if losses else None), _fmt(r.val_bpb), r.message or ""))
    blocks: list[Block] = []
    if scaled:
        blocks.append(Paragraph(
            "A stress run marked 'proxy's x' trained at its proxy's learning rate scaled by the "
            "campaign's horizon rule (see the ladder above; turn it off with "
            "--no-horizon-rule)."))
    panels = rung_panels(records, runs)
    if panels:
        blocks.append(Image("stress_curves.png", plots.rung_curves(panels), "the top rung's loss "
                            "curves at equal tokens, the baseline beside the finalists"))
    return Section("Stress runs", (
        *blocks,
        Table(("stress run", "proxy trial", "status", "verdict", "learning rate", "final loss",
               "val_bpb", "note"), tuple(rows))))


def rung_panels(records: Sequence[TrialRecord], runs: Sequence[TrialRecord]
                ) -> list[tuple[str, list[plots.CurveSeries]]]:
    """The runs' curves as one panel per rung (its tokens), one series per recipe (the proxy
    trial it came from and, for the baseline's family, its rate multiple) with a curve per
    seed, on the tokens every seed reached; the baseline's series first."""
    baselines = {r.trial_id for r in records if r.proposer == BASELINE_PROPOSER}
    rungs: dict[int, dict[tuple[str, float], list[TrialRecord]]] = {}
    for run in runs:
        if run.status == "complete" and run.curve and run.tokens_per_step:
            family = float(run.edit.get("lr_family", 1.0))
            rungs.setdefault(run.tokens, {}).setdefault((run.parent or "", family), []).append(run)
    panels = []
    for tokens, recipes in sorted(rungs.items()):
        series = []
        for (parent, family), seeds in recipes.items():
            length = min(len(run.curve) for run in seeds)
            per_token = seeds[0].tokens_per_step
            is_baseline = parent in baselines
            label = f"{parent} (baseline)" if is_baseline else parent
            series.append(plots.CurveSeries(
                label + ("" if family == 1.0 else f" × {family:g} rate"),
                [float(p["step"]) * per_token for p in seeds[0].curve[:length]],
                [[float(p["loss"]) for p in run.curve[:length]] for run in seeds],
                baseline=is_baseline))
        series.sort(key=lambda one: (not one.baseline, one.label))
        panels.append((f"top rung: {tokens:,} tokens", series))
    return panels


def importance(records: Sequence[TrialRecord]) -> Section:
    found = knob_importance(records)
    if not found:
        return Section("Knob importance", (Paragraph(
            "Not enough evidence yet: importance needs at least four completed proxy trials whose "
            "knobs and val_bpb vary."),))
    return Section("Knob importance", (
        Paragraph("Share of the decision between the better half of trials and the rest that each "
                  "varying knob explains (PED-ANOVA); it sums to 1. The seed is not a knob: what "
                  "it moves is the noise floor."),
        Image("knob_importance.png", plots.horizontal_bars(found, "importance"), "knob importance"),
        Table(("knob", "importance"), tuple((k, f"{v:.3f}") for k, v in found.items()))))


def _reason_key(reason: str) -> str:
    """A reason with its numbers blanked, so the same check's rejections group together."""
    return re.sub(r"\d[\d.,_]*(e[-+]?\d+)?", "N", reason).strip()[:120]


def reasons(records: Sequence[TrialRecord]) -> list[Section]:
    rejected = Counter(_reason_key(reason) for r in records if r.status == "rejected"
                       for reason in (r.reasons or ["(no reason recorded)"]))
    failed = Counter(r.reason or "unknown" for r in records if r.status == "failed")
    sections = []
    for title, counter, file, none in (
            ("Rejections by reason", rejected, "rejections.png", "No candidate was rejected."),
            ("Failures by reason", failed, "failures.png", "No trial failed.")):
        if not counter:
            sections.append(Section(title, (Paragraph(none),)))
            continue
        sections.append(Section(title, (
            Image(file, plots.horizontal_bars(dict(counter), "trials"), title.lower()),
            Table(("reason", "count"), tuple((k, str(n)) for k, n in counter.most_common())))))
    return sections


def resources(records: Sequence[TrialRecord]) -> Section:
    trained = [r for r in records if r.trained
               and (r.metrics.get("tokens_per_s") is not None or r.metrics.get("peak_memory_bytes"))]
    if not trained:
        return Section("Throughput and peak memory", (Paragraph("No trial has reported figures yet."),))
    ids = [r.trial_id for r in trained]
    throughput = [r.metrics.get("tokens_per_s") for r in trained]
    memory = [r.metrics["peak_memory_bytes"] / MIB if r.metrics.get("peak_memory_bytes") else None
              for r in trained]
    rows = tuple((r.trial_id, r.kind, _fmt(t, 0), _fmt(m, 1), _fmt(r.metrics.get("wall_s"), 1))
                 for r, t, m in zip(trained, throughput, memory, strict=True))
    return Section("Throughput and peak memory", (
        Image("throughput_memory.png",
              plots.per_trial(ids, {"tokens/s": throughput, "peak memory (MiB)": memory}),
              "throughput and peak memory per trial"),
        Table(("trial", "kind", "tokens/s", "peak memory (MiB)", "wall s"), rows)))


def _telemetry(record: TrialRecord) -> dict[str, object]:
    found = record.metrics.get("telemetry")
    return found if isinstance(found, dict) else {}


def _energy_source(telemetry: dict[str, object]) -> str:
    """Where the energy came from, and whose it is when a shared GPU's (not the trial's)."""
    source = str(telemetry.get("energy_source") or "")
    shared_by = telemetry.get("gpu_shared_by")
    if isinstance(shared_by, int) and shared_by > 1:
        source += f" (the GPU's, shared by {shared_by} processes)"
    return source


def energy(records: Sequence[TrialRecord]) -> Section:
    trained = [r for r in records if r.trained]
    measured = [r for r in trained if isinstance(_telemetry(r).get("energy_j"), (int, float))]
    if not measured:
        return Section("Energy", (Paragraph(
            "Energy: not measured. No trial recorded an energy counter (NVML total energy on a GPU, "
            "RAPL on a CPU where readable); 'recipelab cost' estimates it from power × time."),))
    joules = [float(_telemetry(r)["energy_j"]) for r in measured]  # type: ignore[arg-type]
    rows = tuple((r.trial_id, r.kind, f"{j:,.0f}", _energy_source(_telemetry(r)))
                 for r, j in zip(measured, joules, strict=True))
    blocks: list[Block] = [
        Paragraph(f"{sum(joules) / 3.6e6:.4f} kWh over {len(measured)} of {len(trained)} trained trials."),
        Image("energy.png", plots.per_trial([r.trial_id for r in measured], {"energy (J)": joules}),
              "energy per trial"),
        Table(("trial", "kind", "energy (J)", "source"), rows)]
    return Section("Energy", tuple(blocks))


def rank_agreement(records: Sequence[TrialRecord]) -> Section:
    title = "Proxy-to-stress rank agreement"
    proxies = {r.trial_id: r for r in scored_proxies(records)}
    pairs = []
    for parent, run in _stress_of(records).items():
        proxy = proxies.get(parent)
        final = run.val_bpb if run.val_bpb is not None else (
            float(run.curve[-1]["loss"]) if run.curve else None)
        if proxy is not None and proxy.val_bpb is not None and final is not None and math.isfinite(final):
            pairs.append((parent, proxy.val_bpb, final))
    if len(pairs) < 3:
        return Section(title, (Paragraph(
            f"Only {len(pairs)} stress-run trial(s) with a result: rank agreement needs at least 3. "
            "Promote more finalists (--promote) or add mid-ranked trials with --fidelity K."),))
    rho = spearman([p[1] for p in pairs], [p[2] for p in pairs])
    verdict = ("undefined (one side does not vary)" if rho is None else f"{rho:+.3f}")
    return Section(title, (
        Paragraph(f"Spearman's rank correlation between proxy val_bpb and the stress run's final "
                  f"val_bpb (training loss where val_bpb is missing), over {len(pairs)} trials: {verdict}. "
                  "Near +1, the short proxy runs rank recipes as the long runs do."),
        Image("rank_agreement.png", plots.agreement([p[1] for p in pairs], [p[2] for p in pairs],
                                                    [p[0] for p in pairs], "stress final val_bpb / loss"),
              "proxy against stress results")))


def recommendation(ledger: Ledger, ctx: ReportContext) -> Section:
    title = "Recommendation for the cloud run"
    found = recommend(ledger, ctx.target, ctx.rates)
    if found is None:
        return Section(title, (Paragraph(f"Nothing to recommend: {ledger.no_winner_reason}."),))
    rec, rates, records = found, ctx.rates, ledger.records
    recommended = recommended_export(
        ledger, ctx.target, ExportOptions(tokens_per_param=rates.tokens_per_param,
                                           gpus=rates.gpus))
    assert recommended is not None, "recommend() and recommended_export() name one recipe"
    exported = recommended.exported
    recipe = exported.recipe
    kept = ledger.kept_baseline is not None  # no winner: the baseline is the answer
    items: tuple[str, ...] = (
        f"{'recommended' if kept else 'winner'}: {rec.winner.trial_id} (val_bpb "
        f"{_fmt(rec.winner.val_bpb)}), chosen as {rec.chosen_because}",
        f"target: {ctx.target.name}, {rec.params:,} parameters, context {ctx.target.context}",
        f"Chinchilla-optimal budget: {rates.tokens_per_param:g} tokens per parameter = {rec.tokens:,} tokens "
        f"= {recipe.steps:,} steps of {recipe.tokens_per_step:,} tokens",
        f"compute: {rec.flops:.3e} FLOPs at {rec.recipe.flops_per_token():,} FLOPs per token",
        f"at {rates.gpu_peak_flops / 1e12:,.0f} TFLOP/s peak per GPU and {rates.mfu:.0%} MFU: "
        f"{_about(rec.gpu_hours)} GPU-hours, {_about(rec.days_on_node)} days on {rates.gpus} GPUs, "
        f"${_about(rec.cost_usd)} at ${rates.usd_per_gpu_hour:.2f} per GPU-hour",
    )
    check = width_check(records)
    if check is not None:
        items += (("one size up: " if check.held else "caution: one size up, ") + check.describe(),)
    gain = ledger.proxy_gain(rec.winner)
    if exported.memory_problem is not None:
        items += (f"caution: at the default {recommended.options.gpu_memory_gib:g} GiB per GPU "
                  f"the recipe does not fit: {exported.memory_problem}",)
    if gain is not None and gain.is_noise and not kept:
        items += (f"caution: the winner's gain over the baseline ({gain.interval_text()}, 90%) "
                  "is within the noise floor; the baseline is as good a bet",)
    blocks: list[Block] = [
        Bullets(items),
        Paragraph(f"The {'baseline' if kept else 'winner'} moved onto the target, each knob by a "
                  f"stated rule ('recipelab export {ctx.campaign} --out DIR' writes this recipe"
                  f"{'' if kept else ', the runner-up'} and a manifest):"),
        Table(("knob", "proxy", "target", "rule"),
              tuple((t.knob, t.proxy, t.target, t.rule) for t in exported.transfers))]
    first_day_tokens = int(rates.gpu_peak_flops * rates.mfu * rates.gpus * SECONDS_PER_DAY
                           / rec.recipe.flops_per_token())
    blocks += prediction_blocks(records, rec, ctx, exported, first_day_tokens)
    return Section(title, tuple(blocks))


def prediction_blocks(records: Sequence[TrialRecord], rec: CloudRunPlan, ctx: ReportContext,
                      exported: Exported, first_day_tokens: int) -> list[Block]:
    """The cloud run's predicted val_bpb (the prediction 'recipelab export' writes and
    'recipelab verify' checks), with its band, what it rests on and how far it reaches."""
    recipe = exported.recipe
    try:
        found = predict(records, rec.winner, recipe.shape)
    except ValueError as error:
        return [Paragraph(f"Prediction: none ({error}).")]
    per_token = bytes_per_token(recipe)
    rows = []
    first_day_step = max(1, first_day_tokens // recipe.tokens_per_step)
    when = [("after the first day", first_day_step)] if first_day_step < recipe.steps else []
    for label, step in (*when, ("end of the run", recipe.steps)):
        text = step * recipe.tokens_per_step * per_token
        center, (low, high) = found.center(text), found.band(text)
        rows.append((label, f"{step:,}", f"{text:,.0f}", _fmt(center),
                     f"{_fmt(low)} – {_fmt(high)}"))
    distance = distance_lines(exported.distance, load_verified(), (low, high), ctx.corpus)
    return [
        Paragraph("Predicted val_bpb of the cloud run, against bytes of training text (val_bpb "
                  "compares across tokenizers; steps do not). The target's val_bpb should land in "
                  f"this band at the same bytes, not above or below it; check the run with "
                  f"'recipelab verify "
                  f"{ctx.campaign} --metrics RUN/metrics.csv'."),
        Table(("when", "step", "bytes of text", "predicted val_bpb", "band"), tuple(rows)),
        Bullets((*found.assumptions(), f"bytes per token: {per_token:g}" + (
            "" if recipe.tokenizer == "byte" else " (assumed for BPE before the run; pretrain "
            "measures it)"))),
        Bullets(tuple(distance)),
    ]


def build_document(ledger: Ledger, ctx: ReportContext) -> Document:
    """The report of the campaign's ``ledger``: the same reading of its records (its
    ``--promote``, its rungs) as the campaign, ``status`` and ``export``."""
    records, noise = ledger.records, ledger.noise
    # the first screen: the verdict and what to do with it, then the search at a glance;
    # the explanation and the evidence follow
    sections = [summary(ledger, ctx), progress(records, noise), why_this_recipe(ledger),
                top_trials(ledger), rung_runs(ledger, ctx.horizon_fits), stress_runs(records),
                importance(records), *reasons(records),
                resources(records), energy(records), rank_agreement(records),
                recommendation(ledger, ctx)]
    if ctx.live is None:
        return Document(f"recipelab report: campaign {ctx.campaign}", tuple(sections))
    return Document(f"recipelab report: campaign {ctx.campaign} (running)",
                    (live_section(ctx.live), *sections), refresh_s=LIVE_REFRESH_S)


LIVE_REFRESH_S = 30


def live_section(live: LiveStatus) -> Section:
    """What a person opening the report mid-campaign reads first."""
    items = (f"updated {live.updated}; this page reloads every {LIVE_REFRESH_S} s",
             f"training now: {live.running or 'nothing (between trials)'}",
             f"ends: {live.ends}")
    blocks: list[Block] = [Bullets(items)]
    if live.curves:
        blocks.append(Image("running.png", plots.running_curves(live.curves),
                            "training loss of the trials in flight"))
    if live.last_lines:
        blocks += [Paragraph("The console's last lines:"),
                   Table(("line",), tuple((line,) for line in live.last_lines))]
    return Section("The campaign is running", tuple(blocks))
