"""The morning report's sections, built from a campaign's records
(:mod:`recipelab.report.sections`): every section in every report, in reading order, saying
what is missing and how to get it while the campaign is unfinished; a report written while
the campaign runs opens with what it is doing; each section's own reading of the records.

Elsewhere: the noise floor, the gains and the evaluation slice's error in test_noise_sections.py;
the stress runs' rates and curves in test_stress_section.py; "Why this recipe" and the compact
edit column in test_why.py; the written files of a real campaign in test_render.py."""

from __future__ import annotations

from typing import Any

from recipelab.recipe import BASELINE_PROPOSER
from recipelab.report.context import CloudRates, LiveStatus, ReportContext, RunningCurve
from recipelab.report.document import Document, Image, Section
from recipelab.report.render import to_markdown
from recipelab.report.sections import (
    LIVE_REFRESH_S,
    TOP_N,
    build_document,
    energy,
    importance,
    live_section,
    rank_agreement,
    reasons,
    resources,
    rung_runs,
    summary,
    top_trials,
)
from recipelab.targets import get_target, proxy_recipe
from recipelab.trajectory.horizon import HorizonFit
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord
from tests.trajectory.test_ladder import PROXIES, top

TINY = proxy_recipe("tiny")  # its learning rate is 0.01
CONTEXT = ReportContext("nightly", get_target("toy"), "tiny")
CURVE = [{"step": s, "loss": 3.0 - s / 100} for s in (5, 10, 15, 20)]
TITLES = ["Summary", "val_bpb by iteration", "Why this recipe", "Top 10 proxy trials",
          "The ladder of fidelities", "Stress runs", "Knob importance", "Rejections by reason",
          "Failures by reason", "Throughput and peak memory", "Energy",
          "Proxy-to-stress rank agreement", "Recommendation for the cloud run"]


def trial(trial_id: str, val_bpb: float | None = None, edit: dict[str, Any] | None = None, *,
          status: str = "complete", kind: str = "proxy", proposer: str = "classical-tpe",
          **fields: Any) -> TrialRecord:
    """A trial of the tiny preset with ``edit`` applied, its recipe whole (as a campaign's)."""
    return TrialRecord(campaign="nightly", trial_id=trial_id, kind=kind, status=status,
                       proposer=proposer, val_bpb=val_bpb, edit=edit or {},
                       recipe=TINY.apply(edit or {}).model_dump(mode="json"), **fields)


def campaign() -> list[TrialRecord]:
    """A short night: the baseline, a better rate and a worse one, a rejected candidate, a
    failed one, and the better rate's stress run."""
    return [
        trial("p0000", 2.50, proposer=BASELINE_PROPOSER,
              metrics={"tokens_per_s": 900.0, "peak_memory_bytes": 2**27, "wall_s": 12.5}),
        trial("p0001", 2.40, {"optimizer.lr": 0.02}),
        trial("p0002", 2.55, {"optimizer.lr": 0.002}),
        trial("p0003", None, {"batch_size": 512}, status="rejected",
              reasons=["batch_size 512 needs 9.1 GiB, over the 8 GiB that fit"]),
        trial("p0004", None, {"optimizer.lr": 0.5}, status="failed", reason="nan"),
        trial("s0000", 2.20, {"optimizer.lr": 0.02}, kind="stress", parent="p0001",
              verdict="stable", curve=CURVE)]


def markdown(*sections: Section) -> str:
    return to_markdown(Document("report", sections))


def images(section: Section) -> list[str]:
    return [block.filename for block in section.blocks if isinstance(block, Image)]


def row_of(text: str, first_cells: str) -> str:
    """The Markdown table row that starts with ``first_cells``."""
    return next(line for line in text.splitlines() if line.startswith(f"| {first_cells} |"))


def test_every_section_is_in_every_report_in_reading_order() -> None:
    """The verdict and the search first, then the explanation, then the evidence: the same
    sections whether the night has produced anything yet or not."""
    empty = build_document(Ledger([]), CONTEXT)
    night = build_document(Ledger(campaign()), CONTEXT)
    assert [s.title for s in empty.sections] == [s.title for s in night.sections] == TITLES
    assert empty.title == night.title == "recipelab report: campaign nightly"
    assert all(section.blocks for section in (*empty.sections, *night.sections))
    assert empty.images() == [], "no plot of nothing"
    assert [image.filename for image in night.images()] == [
        "val_bpb.png", "stress_curves.png", "rejections.png", "failures.png",
        "throughput_memory.png"]


def test_an_unfinished_campaigns_sections_say_what_is_missing_and_how_to_get_it() -> None:
    text = markdown(*build_document(Ledger([]), CONTEXT).sections)
    for said in ("proxy trials: none yet",
                 "noise floor: not measured (the baseline has fewer than two seeds)",
                 "No proxy trial has completed yet: the plot appears once one has.",
                 "up to the top rung at --stress-steps",
                 "No stress runs yet: finalists are stress-run when the proxy search ends "
                 "(or now, with 'recipelab stress CAMPAIGN')",
                 "importance needs at least four completed proxy trials",
                 "No candidate was rejected.", "No trial failed.",
                 "No trial has reported figures yet.",
                 "Energy: not measured", "'recipelab cost' estimates it from power × time",
                 "rank agreement needs at least 3. Promote more finalists (--promote) or add "
                 "mid-ranked trials with --fidelity K",
                 "Nothing to recommend: no proxy trial has completed yet."):
        assert said in text, said


def test_a_report_written_while_the_campaign_runs_opens_with_it_and_reloads_itself() -> None:
    live = LiveStatus(updated="02:13:05 UTC", running="p0005 (proxy)", ends="at 07:00 UTC")
    running = build_document(Ledger([]), ReportContext("nightly", get_target("toy"), "tiny",
                                                       live=live))
    assert running.title == "recipelab report: campaign nightly (running)"
    assert running.refresh_s == LIVE_REFRESH_S
    assert [s.title for s in running.sections] == ["The campaign is running", *TITLES]
    assert build_document(Ledger([]), CONTEXT).refresh_s is None


def test_the_live_status_says_what_trains_when_the_night_ends_and_what_the_console_said(
) -> None:
    between = live_section(LiveStatus(updated="02:13:05 UTC", running="", ends="12 proxy "
                                      "trials left", last_lines=("p0004 failed: nan",)))
    text = markdown(between)
    assert text.splitlines()[4:7] == [
        f"- updated 02:13:05 UTC; this page reloads every {LIVE_REFRESH_S} s",
        "- training now: nothing (between trials)", "- ends: 12 proxy trials left"]
    assert images(between) == [], "no loss curve: nothing in flight"
    assert "The console's last lines:" in text and "| p0004 failed: nan |" in text
    training = live_section(LiveStatus(
        updated="02:14:05 UTC", running="p0005", ends="at 07:00 UTC",
        curves=(RunningCurve("p0005", (10, 20), (3.1, 2.9)),)))
    text = markdown(training)
    assert "- training now: p0005" in text and images(training) == ["running.png"]
    assert "console" not in text, "no lines yet: no table of them"


def test_the_summary_opens_with_the_winner_and_the_export_command_then_counts_the_night(
) -> None:
    ledger = Ledger(campaign())
    items = markdown(summary(ledger, CONTEXT)).splitlines()[4:]
    assert items[:2] == [f"- {ledger.winner_line()}",
                         "- next: 'recipelab export nightly --out cloud/ --target toy' writes "
                         "the cloud run's recipe and its prediction"]
    assert items[2:6] == ["- target: toy (5,869,824 parameters); proxy preset: tiny",
                          "- proxy trials: 3 complete, 1 failed, 1 rejected", "- rung runs: 0",
                          "- top-rung (stress) runs: 1"]
    assert items[6] == "- best proxy trial: p0001 val_bpb 2.4000 (classical-tpe: lr=0.02)"


def test_the_top_trials_are_the_best_ten_candidates_each_with_its_stress_verdict() -> None:
    records = [trial("p0000", 2.50, proposer=BASELINE_PROPOSER)]
    records += [trial(f"p{i:04d}", 2.50 - i / 100, {"optimizer.lr": 0.01 + i / 1000})
                for i in range(1, 13)]
    records.append(trial("s0000", 2.2, kind="stress", parent="p0012", verdict="diverged",
                         curve=CURVE))
    text = markdown(top_trials(Ledger(records)))
    ranks = [line.split(" | ")[:2] for line in text.splitlines() if line.startswith("| ")][1:]
    assert len(ranks) == TOP_N == 10
    assert ranks == [[f"| {rank}", f"p{13 - rank:04d}"] for rank in range(1, 11)]
    assert row_of(text, "1 | p0012").endswith("| diverged |")
    assert row_of(text, "2 | p0011").endswith("|  |"), "no stress run: nothing to say"
    assert ("Gains are not marked: the noise floor needs the baseline trained with at least two "
            "seeds.") in text


def test_the_ladder_gives_each_climbers_seeds_and_gain_beside_the_baseline_as_control() -> None:
    records = [*PROXIES, *top({"p0001": (0.20, 0.22, 0.21), "p0002": (0.05, 0.07, 0.06)})]
    text = markdown(rung_runs(Ledger(records)))
    assert row_of(text, "1000").endswith("| p0001 | 3 | 1.3400 | +0.2100 | 1 |")
    assert "| p0002 | 3 | 1.4900 | +0.0600 | 2 |" in text
    assert "| p0000 | 3 | 1.5500 | control | baseline |" in text
    assert "the published prior" in text, "no family at two budgets: the rule is the prior's"
    calibrated = markdown(rung_runs(Ledger(records), (HorizonFit(alpha=0.5, se=0.05),)))
    assert "updated by 1 fit(s) of one recipe's learning-rate families" in calibrated


def test_the_calibrations_horizon_fits_reach_the_ladder_through_the_context() -> None:
    ctx = ReportContext("nightly", get_target("toy"), "tiny",
                        horizon_fits=(HorizonFit(alpha=0.5, se=0.05),))
    ladder = TITLES.index("The ladder of fidelities")
    calibrated = build_document(Ledger(campaign()), ctx).sections[ladder]
    assert "updated by 1 fit(s)" in markdown(calibrated)


def test_rejections_group_by_reason_with_numbers_blanked_and_failures_by_their_cause() -> None:
    records = [trial("p0001", status="rejected"), trial("p0002", status="failed"),
               trial("p0003", status="rejected", reasons=["batch_size 512 needs 9.1 GiB"]),
               trial("p0004", status="rejected", reasons=["batch_size 1024 needs 18.2 GiB",
                                                          "lr 1.5 is above 1"]),
               trial("p0005", status="failed", reason="oom"),
               trial("p0006", status="failed", reason="oom")]
    rejected, failed = reasons(records)
    text = markdown(rejected, failed)
    assert (rejected.title, failed.title) == ("Rejections by reason", "Failures by reason")
    assert ("| batch_size N needs N GiB | 2 |\n| (no reason recorded) | 1 |\n"
            "| lr N is above N | 1 |") in text, "the commonest first"
    assert "| oom | 2 |\n| unknown | 1 |" in text
    assert images(rejected) == ["rejections.png"] and images(failed) == ["failures.png"]


def test_throughput_and_memory_list_every_trained_trial_that_reported_a_figure() -> None:
    records = [trial("p0000", 2.5, metrics={"tokens_per_s": 12345.6, "peak_memory_bytes": 3 * 2**26,
                                            "wall_s": 30.04}),
               trial("p0001", status="failed", reason="oom",
                     metrics={"peak_memory_bytes": 2**30}),
               trial("p0002", status="interrupted", metrics={"tokens_per_s": 900.0}),
               trial("p0003", status="rejected", metrics={"peak_memory_bytes": 2**30}),
               trial("p0004", 2.4, metrics={"wall_s": 9.0})]
    section = resources(records)
    text = markdown(section)
    assert "| p0000 | proxy | 12346 | 192.0 | 30.0 |" in text
    assert "| p0001 | proxy | — | 1024.0 | — |" in text, "a missing figure is a dash"
    assert "p0002" not in text and "p0003" not in text and "p0004" not in text
    assert images(section) == ["throughput_memory.png"]


def with_energy(records: list[TrialRecord], **telemetry: Any) -> list[TrialRecord]:
    """``records`` with ``telemetry`` on each completed proxy trial, 1,800 J each."""
    return [r.model_copy(update={"metrics": {**r.metrics, "telemetry": {
        "energy_j": 1800.0, **telemetry}}}) if r.kind == "proxy" and r.status == "complete"
        else r for r in records]


def test_measured_energy_is_reported_per_trial_with_its_source() -> None:
    records = with_energy(campaign(), energy_source="rapl")
    section = energy(records)
    text = markdown(section)
    assert f"{3 * 1800 / 3.6e6:.4f} kWh over 3 of 5 trained trials." in text
    assert "| p0000 | proxy | 1,800 | rapl |" in text
    assert images(section) == ["energy.png"] and "not measured" not in text


def test_the_energy_of_a_shared_gpu_is_reported_as_the_gpus() -> None:
    records = with_energy(campaign(), energy_source="nvml-energy-counter", energy_scope="device",
                          gpu_shared_by=2)
    assert "| nvml-energy-counter (the GPU's, shared by 2 processes) |" in markdown(
        energy(records))


def stressed(finals: tuple[float | None, ...], *, curve_only: int | None = None
             ) -> list[TrialRecord]:
    """Proxy trials at val_bpb 2.40, 2.45, ... each stress-run to ``finals`` (None: no
    result); the ``curve_only``-th stress run recorded its training loss but no val_bpb."""
    records = []
    for i, final in enumerate(finals):
        proxy_id = f"p{i + 1:04d}"
        records.append(trial(proxy_id, 2.40 + i / 20, {"optimizer.lr": 0.02 + i / 100}))
        curve = [{"step": 20, "loss": final}] if final is not None else []
        records.append(trial(f"s{i:04d}", None if i == curve_only else final, kind="stress",
                             parent=proxy_id, verdict="stable", curve=curve,
                             status="complete" if final is not None else "failed"))
    return records


def test_rank_agreement_is_spearmans_rho_over_three_or_more_stress_runs() -> None:
    section = rank_agreement(stressed((2.10, 2.15, 2.20), curve_only=1))
    assert "over 3 trials: +1.000." in markdown(section)
    assert images(section) == ["rank_agreement.png"]
    reversed_ranks = markdown(rank_agreement(stressed((2.20, 2.15, 2.10))))
    assert "over 3 trials: -1.000." in reversed_ranks
    flat = markdown(rank_agreement(stressed((2.10, 2.10, 2.10))))
    assert "over 3 trials: undefined (one side does not vary)." in flat
    short = markdown(rank_agreement(stressed((2.10, None, 2.20))))
    assert "Only 2 stress-run trial(s) with a result: rank agreement needs at least 3." in short


def test_knob_importance_appears_once_four_trials_vary_a_knob() -> None:
    records = [trial(f"p{i:04d}", 2.50 - i / 10, {"optimizer.lr": 0.01 + i / 100})
               for i in range(4)]
    assert "Not enough evidence yet" in markdown(importance(records[:3]))
    section = importance(records)
    assert "| optimizer.lr | 1.000 |" in markdown(section), "the only knob decides it all"
    assert images(section) == ["knob_importance.png"]


def test_the_recommendation_prices_the_cloud_run_at_the_contexts_rates() -> None:
    rates = CloudRates(mfu=0.5, usd_per_gpu_hour=4.0, gpus=4, tokens_per_param=10.0)
    ctx = ReportContext("nightly", get_target("toy"), "tiny", rates=rates)
    text = markdown(build_document(Ledger(campaign()), ctx).sections[-1])
    assert "- winner: p0001 (val_bpb 2.4000)" in text
    assert "- target: toy, 5,869,824 parameters, context 1024" in text
    assert "Chinchilla-optimal budget: 10 tokens per parameter = 58,698,240 tokens" in text
    assert "at 989 TFLOP/s peak per GPU and 50% MFU" in text
    assert "days on 4 GPUs" in text and "at $4.00 per GPU-hour" in text
    assert "'recipelab export nightly --out DIR' writes this recipe" in text
    assert "| optimizer.lr | 0.02 |" in text, "the knobs moved onto the target, each by a rule"
    assert "'recipelab verify nightly --metrics RUN/metrics.csv'" in text
