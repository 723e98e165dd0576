"""The report's noise floor and gains: paired when the records allow it, each gain with its
interval, the evaluation slice's own sampling error beside the floor, and no gain inside the
noise shown as a win."""

from __future__ import annotations

import math
import random
import re
from typing import Any

from recipelab.recipe import FALLBACK_ARTIFACT
from recipelab.report import ReportContext
from recipelab.report.document import Document, Section
from recipelab.report.render import to_markdown
from recipelab.report.sections import summary, top_trials
from recipelab.targets import get_target
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.noise import noise_floor
from recipelab.trajectory.record import TrialRecord

BASELINE = {0: 2.50, 1: 2.80, 2: 2.20}  # the seed alone moves val_bpb by 0.6


def record(trial_id: str, val_bpb: float, *, seed: int = 0, proposer: str = "baseline",
           lr: float | None = None, stderr: float | None = 0.004, **fields: Any) -> TrialRecord:
    recipe: dict[str, Any] = {"seed": seed, "optimizer": {"lr": lr or 0.003}}
    return TrialRecord(campaign="c", trial_id=trial_id, status="complete", kind="proxy",
                       proposer=proposer, val_bpb=val_bpb, recipe=recipe,
                       edit={"optimizer.lr": lr} if lr else {},
                       metrics={"val_bpb_stderr": stderr} if stderr is not None else {},
                       **fields)


def campaign(paired: bool) -> list[TrialRecord]:
    """Three baseline seeds, a real gain of 0.05 (lr 0.01) and a gain of 0.001 (lr 0.004),
    with seed re-runs of both when ``paired``."""
    records = [record(f"p000{s}", v, seed=s) for s, v in BASELINE.items()]
    records += [record("p0003", 2.454, proposer="tpe", lr=0.01),
                record("p0004", 2.499, proposer="tpe", lr=0.004)]
    if paired:
        records += [record("p0005", 2.744, seed=1, proposer="seed-rerun", lr=0.01, parent="p0003"),
                    record("p0006", 2.152, seed=2, proposer="seed-rerun", lr=0.01, parent="p0003"),
                    record("p0007", 2.801, seed=1, proposer="seed-rerun", lr=0.004, parent="p0004"),
                    record("p0008", 2.197, seed=2, proposer="seed-rerun", lr=0.004, parent="p0004")]
    return records


def markdown(*sections: Section) -> str:
    return to_markdown(Document("report", sections))


def context() -> ReportContext:
    return ReportContext("nightly", get_target("toy"), "tiny")


def row_of(text: str, trial_id: str) -> str:
    return next(line for line in text.splitlines() if f"| {trial_id} |" in line)


def test_with_paired_seeds_the_report_gives_each_gain_its_interval_and_resolves_the_real_one(
) -> None:
    records = campaign(paired=True)
    floor = noise_floor(records)
    assert floor is not None and floor.kind == "paired"
    text = markdown(summary(Ledger(records), context()), top_trials(Ledger(records)))
    assert "paired noise floor" in text and "unpaired seed spread 0.6000" in text
    real, small = row_of(text, "p0003"), row_of(text, "p0004")
    assert "within noise" not in real and "| +0.0500 [+0.04" in real  # mean over three seeds
    assert "within noise: +0.0010 [-0.00" in small and "3 seeds" in small
    assert "Noise floor in use: paired." in text
    assert "evaluation slice: val_bpb's sampling error" in text and "±0.0040" in text


def test_before_any_seed_rerun_the_report_says_the_floor_is_unpaired() -> None:
    records = campaign(paired=False)
    floor = noise_floor(records)
    assert floor is not None and floor.kind == "unpaired"
    text = markdown(summary(Ledger(records), context()), top_trials(Ledger(records)))
    assert "unpaired noise floor: baseline val_bpb 2.5000 ± 0.6000" in text
    assert "within noise" in row_of(text, "p0003")  # the unpaired spread swallows it
    assert "Noise floor in use: unpaired." in text
    assert "not negligible" not in text  # 0.004 against 0.6


def blocks(bpb: float, jitter: float, seed: int, whole: bool = False) -> dict[str, Any]:
    """32 blocks of 2 KiB scored at ``bpb`` on average: the text's own difficulty varies by
    block (shared by every trial on the slice) and each trial's by ``jitter`` of its own."""
    rng = random.Random(seed)
    per_block = [bpb + 0.4 * math.sin(k) + rng.gauss(0, jitter) for k in range(32)]
    return {"nats": [v * math.log(2) * 2048 for v in per_block], "bytes": [2048] * 32,
            "whole_text": whole}


def with_blocks(records: list[TrialRecord], jitter: float,
                whole: bool = False) -> list[TrialRecord]:
    return [r.model_copy(update={"metrics": {"val_bpb_stderr": 0.07, "eval_blocks": blocks(
        r.val_bpb or 0.0, jitter, seed=i, whole=whole)}}) for i, r in enumerate(records)]


def test_a_gains_slice_error_is_paired_and_far_below_a_scores_own() -> None:
    records = with_blocks(campaign(paired=True), jitter=0.001)
    text = markdown(summary(Ledger(records), context()))
    assert "val_bpb's sampling error is ±0.0700" in text
    gain = float(re.search(r"a gain's is ±(\d\.\d+)", text)[1])  # type: ignore[index]
    assert gain < 0.001, "the text's own difficulty is shared by both trials and cancels"
    assert ": negligible" in text


def test_a_slice_whose_gain_error_rivals_the_floor_is_called_out() -> None:
    records = with_blocks(campaign(paired=True), jitter=0.5)
    text = markdown(summary(Ledger(records), context()))
    assert "not negligible: a larger eval_bytes would narrow it" in text


def test_a_slice_that_is_the_whole_validation_text_says_so() -> None:
    records = with_blocks(campaign(paired=True), jitter=0.5, whole=True)
    text = markdown(summary(Ledger(records), context()))
    assert "evaluation slice (the whole validation text)" in text
    assert "the whole validation text: no larger slice exists" in text


def test_records_without_the_slice_error_say_it_was_not_recorded() -> None:
    records = [r.model_copy(update={"metrics": {}}) for r in campaign(paired=False)]
    text = markdown(summary(Ledger(records), context()))
    assert "its sampling error of val_bpb was not recorded" in text


def test_the_summary_says_how_many_search_trials_were_the_llms_and_how_many_fell_back() -> None:
    records = campaign(paired=False)
    plain = markdown(summary(Ledger(records), context()))
    assert "LLM" not in plain, "a night without an LLM says nothing about one"
    records += [record("p0005", 2.47, proposer="llm:smollm2", lr=0.005),
                record("p0006", 2.48, proposer="tpe", lr=0.006,
                       artifacts={FALLBACK_ARTIFACT: "trials/p0006/fallback.txt"})]
    text = markdown(summary(Ledger(records), context()))
    assert ("the LLM proposed 1 of 4 search trials; the sampler took 1 of its turns when it "
            "failed") in text


def test_the_summary_sets_the_pick_against_the_baseline_at_its_best_rate() -> None:
    from tests.trajectory.test_ladder import PROXIES, family, top

    records = [*PROXIES, *top({"p0001": (0.20, 0.22, 0.21)}), *family((1.20, 1.30, 1.25))]
    text = " ".join(markdown(summary(Ledger(records), context())).split())
    assert ("no better than lowering the learning rate: it beats the baseline at its own rate "
            "by +0.2100") in text
    assert "not the baseline at 0.5× its rate" in text
