"""``recipelab status``: each trial counted once, each lost trial named with its node and
its one re-run, and one gain per trial with its seeds, as the report shows it."""

from __future__ import annotations

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.watch.status import campaign_status
from recipelab.report.document import Document
from recipelab.report.render import to_markdown
from recipelab.report.sections import top_trials
from recipelab.targets import proxy_recipe
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

RECIPE = proxy_recipe("tiny").model_dump(mode="json")


def trial(trial_id: str, status: str, *, kind: str = "proxy", proposer: str = "classical-tpe",
          retry_of: str | None = None, parent: str | None = None) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, kind=kind, status=status,
                       proposer=proposer, retry_of=retry_of, parent=parent, recipe=RECIPE,
                       val_bpb=2.0 if status == "complete" else None)


def test_status_counts_retries_seed_reruns_and_stress_runs_once_each(
        tiny_settings: CampaignSettings) -> None:
    """A 12-iteration campaign killed and resumed: 5 trials interrupted (3 proxy, re-run
    once each; 2 stress, resumed), 3 seed re-runs of close finalists, 3 stress runs."""
    settings = tiny_settings.model_copy(update={"iterations": 12})
    records = [trial(f"p{i:04d}", "complete") for i in range(9)]
    records += [trial(f"p{i:04d}", "interrupted") for i in range(9, 12)]
    records += [trial(f"p{i:04d}", "complete", retry_of=f"p{i - 3:04d}") for i in range(12, 15)]
    records += [trial(f"p{i:04d}", "complete", proposer="seed-rerun", parent="p0001")
                for i in range(15, 18)]
    records += [trial("s0000", "interrupted", kind="stress", parent="p0001"),
                trial("s0001", "interrupted", kind="stress", parent="p0001"),
                trial("s0002", "complete", kind="stress", parent="p0001", retry_of="s0000"),
                trial("s0003", "complete", kind="stress", parent="p0002"),
                trial("s0004", "complete", kind="stress", parent="p0003")]

    view = campaign_status(settings, records)

    assert view.headline == ("campaign tiny: 12/12 proxy trials trained (+3 seed re-runs, "
                             "3 interrupted and re-run), 3 stress runs")


def test_status_names_each_lost_trial_its_node_and_its_one_re_run(
        tiny_settings: CampaignSettings) -> None:
    """A cluster lost p0001 on a node; its re-run p0002 was lost too (no third run);
    p0003 was lost with the orchestrator (no node known) and waits for its re-run."""
    node = {"node": "vm/89868ae1"}
    records = [trial("p0000", "complete"),
               trial("p0001", "interrupted").model_copy(update={"metrics": node}),
               trial("p0002", "interrupted", retry_of="p0001"),
               trial("p0003", "interrupted")]

    view = campaign_status(tiny_settings.model_copy(update={"iterations": 4}), records)

    assert view.lost == ("p0001 (proxy) interrupted on node vm/89868ae1: re-run as p0002 "
                         "(interrupted)",
                         "p0002 (proxy) interrupted: a re-run lost again, not run a third time",
                         "p0003 (proxy) interrupted: to re-run")
    assert view.headline.startswith(
        "campaign tiny: 1/4 proxy trials trained (1 interrupted and re-run, 1 interrupted, "
        "to re-run, 1 re-run interrupted again, not run a third time)")


def seeded(trial_id: str, val_bpb: float, seed: int, proposer: str = "baseline",
           lr: float | None = None, parent: str | None = None) -> TrialRecord:
    recipe = proxy_recipe("tiny").apply({"seed": seed, **({"optimizer.lr": lr} if lr else {})})
    return TrialRecord(campaign="c", trial_id=trial_id, kind="proxy", status="complete",
                       proposer=proposer, parent=parent, recipe=recipe.model_dump(mode="json"),
                       edit={"optimizer.lr": lr} if lr else {}, val_bpb=val_bpb)


def test_status_and_the_report_show_one_gain_per_trial_with_its_seeds(
        tiny_settings: CampaignSettings) -> None:
    """A candidate trained at three seeds: status and the report's top-10 table show the same
    gain over the baseline, the mean over its seeds, and say how many."""
    records = [seeded(f"p000{s}", v, s) for s, v in enumerate((2.50, 2.80, 2.20))]
    records += [seeded("p0003", 2.40, 0, "classical-tpe", lr=0.02),
                seeded("p0004", 2.77, 1, "seed-rerun", lr=0.02, parent="p0003"),
                seeded("p0005", 2.16, 2, "seed-rerun", lr=0.02, parent="p0003")]
    mark = campaign_status(tiny_settings, records).marks["p0003"]
    assert mark.endswith(", 3 seeds") and mark.startswith("+0.0567 [")
    floor = Ledger(records).noise
    assert floor is not None
    table = to_markdown(Document("r", (top_trials(Ledger(records)),)))
    assert f"| p0003 | 2.4000 | {mark} |" in table
