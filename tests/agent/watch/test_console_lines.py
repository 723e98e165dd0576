"""The console a person watches: one short line per finished trial and per phase, while
``events.jsonl`` keeps every event with every field."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.watch.console_lines import LINE_LIMIT, ReadableLines

from ..conftest import ScriptedProposer, fake_executor, read_jsonl

EDITS: list[dict[str, Any]] = [{"shape.activation": "gelu"},  # breaks the target's shape: rejected
         {"optimizer.lr": 0.02, "optimizer.eps": 1e-10, "stability.init_std": 0.01},
         {"optimizer.lr": 0.005}]


def watch(settings: CampaignSettings, directory: Path, log_format: str) -> list[str]:
    output = io.StringIO()
    Campaign(settings, directory, executor=fake_executor(),
             proposer=ScriptedProposer(settings.baseline(), EDITS),
             console=Console(file=output, width=300), log_format=log_format).run()  # type: ignore[arg-type]
    return output.getvalue().splitlines()


def test_each_finished_trial_is_one_short_line_with_its_gain_and_the_knobs_that_matter(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 4, "promote": 2})
    lines = watch(settings, tmp_path, "lines")

    assert all(len(line) <= LINE_LIMIT for line in lines), max(lines, key=len)
    assert lines[0].startswith("campaign tiny: tiny proxy")
    [rejected] = [i for i, line in enumerate(lines) if "rejected" in line]
    assert lines[rejected] == "p0001 rejected (activation=gelu):"
    [reason] = [r["reasons"][0] for r in read_jsonl(tmp_path / "trajectory.jsonl")
                if r["trial_id"] == "p0001" and r["status"] == "rejected"]
    under = itertools.takewhile(lambda line: line.startswith("      "), lines[rejected + 1:])
    assert " ".join(line.strip() for line in under) == reason, "the whole reason, wrapped"
    [edited] = [line for line in lines if line.startswith("p0002 proxy")]
    # the rate first, not eps (whose relative change is the largest); a paired gain
    assert edited.endswith("lr=0.02, eps=1e-10, init_std=0.01")
    assert " vs baseline at seed 0" in edited and "val_bpb " in edited  # one seed, said so
    assert any(line.startswith("── top rung: 30 steps") for line in lines)
    stress = [line for line in lines if line.startswith("s0")]
    assert len(stress) == len([r for r in read_jsonl(tmp_path / "trajectory.jsonl")
                               if r["kind"] == "stress"])
    assert not any(line.startswith(("trial_started", "proposal ")) for line in lines)
    events = [e["event"] for e in read_jsonl(tmp_path / "events.jsonl")]
    assert "trial_started" in events and "proposal" in events, "the file keeps every event"


def test_json_log_format_prints_every_event_as_events_jsonl_holds_it(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    lines = watch(tiny_settings, tmp_path, "json")
    printed = [json.loads(line) for line in lines if line.startswith("{")]
    kept = read_jsonl(tmp_path / "events.jsonl")
    assert [e["event"] for e in printed] == [e["event"] for e in kept]


def test_a_learning_rate_family_run_says_whose_rate_it_multiplies() -> None:
    """The baseline's family and a candidate's probe are both ``lr-family`` runs; each line
    names the recipe whose rate it multiplies."""
    lines = ReadableLines()
    for trial, proposer, parent, edit in (
            ("p0000", "baseline", None, {}),
            ("r0000", "lr-family", "p0000", {"lr_family": 0.5}),
            ("r0002", "lr-family", "p0005", {"optimizer.lr": 0.007, "lr_family": 2.61})):
        lines.line({"event": "trial_started", "trial_id": trial, "kind": "rung",
                    "proposer": proposer, "parent": parent, "edit": edit, "seed": 0})
    finished = {"event": "trial_finished", "kind": "rung", "steps": 20, "tokens": 10240,
                "status": "complete", "val_bpb": 4.5, "wall_s": 3.0}
    assert str(lines.line({**finished, "trial_id": "r0000"})).endswith("the baseline at lr × 0.5")
    assert str(lines.line({**finished, "trial_id": "r0002"})).endswith("p0005 at lr × 2.61")


def test_the_probes_are_one_line_that_says_why_they_run() -> None:
    line = ReadableLines().line({"event": "probes_started", "steps": 20, "lr_multiple": 2.09,
                                 "lr_multiples": [0.48, 2.09],
                                 "candidates": ["p0009", "p0012", "p0003"]})
    assert line == ("── probes: 20 steps again at lr × 0.48 and × 2.09 for 3 candidate(s), so "
                    "a rate meant for the long run, or too hot here, is not cut: p0009, p0012, "
                    "p0003")
    older = ReadableLines().line({"event": "probes_started", "steps": 20, "lr_multiple": 2.09,
                                  "candidates": ["p0009"]})
    assert str(older).startswith("── probes: 20 steps again at lr × 2.09 for 1 candidate(s)"), (
        "an events file written before the probe below")


def test_a_width_run_names_its_parent_and_size_and_the_rung_says_what_it_measured() -> None:
    lines = ReadableLines()
    lines.line({"event": "trial_started", "trial_id": "w0001", "kind": "width", "seed": 0,
                "parent": "p0009", "proposer": "width-rung", "edit": {"width_multiple": 2}})
    run = lines.line({"event": "trial_finished", "trial_id": "w0001", "kind": "width",
                      "steps": 400, "tokens": 102_400, "status": "complete", "val_bpb": 3.2824,
                      "wall_s": 9.4})
    assert run is not None and run.endswith("p0009 at 2× the proxy's width")
    assert "vs baseline" not in run  # another model's size: no baseline shares it
    measured = lines.line({"event": "width_measured", "narrow": 3.3835, "wide": 3.2824,
                           "target_lowering": 0.1524})
    assert measured == ("   twice the width scored 3.3835 → 3.2824: the law puts the target "
                        "0.1524 below the proxy's width at equal tokens")
    none = lines.line({"event": "width_measured", "narrow": 3.9198, "wide": 3.9630,
                       "target_lowering": None})
    assert none == ("   twice the width scored 3.9198 → 3.9630: no gap measured, the export "
                    "keeps the law's size term")


def test_the_width_rungs_control_is_named_and_the_gain_one_size_up_is_said() -> None:
    lines = ReadableLines()
    lines.line({"event": "trial_started", "trial_id": "w0002", "kind": "width", "seed": 0,
                "parent": "p0000", "proposer": "width-rung",
                "edit": {"width_multiple": 2, "arm": "baseline"}})
    run = lines.line({"event": "trial_finished", "trial_id": "w0002", "kind": "width",
                      "steps": 400, "tokens": 102_400, "status": "complete", "val_bpb": 3.3601,
                      "wall_s": 9.1})
    assert run is not None and run.endswith("p0000 at 2× the proxy's width (the baseline, the control)")
    lines.line({"event": "trial_started", "trial_id": "w0006", "kind": "width", "seed": 0,
                "parent": "p0009", "proposer": "width-rung",
                "edit": {"width_multiple": 2, "lr_family": 0.5}})
    family = lines.line({"event": "trial_finished", "trial_id": "w0006", "kind": "width",
                         "steps": 400, "tokens": 102_400, "status": "complete",
                         "val_bpb": 3.3, "wall_s": 9.0})
    assert family is not None and family.endswith("p0009 at 2× the proxy's width at lr × 0.5")
    exponent = lines.line({"event": "width_measured", "narrow": 3.3835, "wide": 3.2824,
                           "target_lowering": 0.1524, "lr_size_exponent": -0.4312,
                           "lr_size_exponent_se": 0.2404})
    assert exponent is not None and exponent.endswith(
        "\n   the best rate falls as N^-0.431 ± 0.240 between the two widths (Step Law: N^-0.713)")
    held = lines.line({"event": "width_measured", "narrow": 3.3835, "wide": 3.2824,
                       "target_lowering": 0.1524, "gain_at_twice_width": 0.0777})
    assert held is not None and held.endswith("\n   at twice the width it beats the baseline by +0.0777")
    lost = lines.line({"event": "width_measured", "narrow": 3.3835, "wide": 3.2824,
                       "target_lowering": 0.1524, "gain_at_twice_width": -0.0312})
    assert lost is not None and lost.endswith(
        "does not beat the baseline (-0.0312): the gain did not hold one size up")
    kept = lines.line({"event": "width_measured", "narrow": 3.3835, "wide": 3.2824,
                       "target_lowering": 0.1524, "gain_at_twice_width": -0.1792,
                       "gain_floor": 0.1616, "baseline_kept": True})
    assert kept is not None and kept.endswith(
        "the baseline beats it by 0.1792, more than the noise floor (±0.1616): the campaign "
        "keeps the baseline")
    tie = lines.line({"event": "width_measured", "narrow": 3.3835, "wide": 3.2824,
                      "target_lowering": 0.1524, "gain_at_twice_width": 0.0084,
                      "gain_floor": 0.0412})
    assert tie is not None and tie.endswith(
        "its gain over the baseline, +0.0084, is within the noise floor (±0.0412)")


def test_a_close_call_says_which_seeds_it_buys_and_why() -> None:
    line = ReadableLines().line({"event": "close_call", "trial_id": "p0010", "steps": 1000,
                                 "seeds": [1003, 1004], "gain": 0.02394, "gain_low": -0.009951,
                                 "gain_high": 0.057832, "control_lr_factor": 0.5})
    assert line == ("── close call: p0010 gains +0.0239 [-0.0100, +0.0578] over the baseline at "
                    "0.5× its rate at 1000 steps; both train seed(s) 1003, 1004 for a second look")
    untuned = ReadableLines().line({"event": "close_call", "trial_id": "p0010", "steps": 1000,
                                    "seeds": [1003], "gain": 0.02, "gain_low": -0.01,
                                    "gain_high": 0.05, "control_lr_factor": 1.0})
    assert untuned is not None and "over the baseline at 1000 steps" in untuned
