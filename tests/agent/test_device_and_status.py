"""The guardrails judge the device ``--device`` asks for; ``status`` counts each trial once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings, SettingsError
from recipelab.agent.status import campaign_status
from recipelab.guardrails.hardware import resolve_device
from recipelab.recipe import proxy_recipe
from recipelab.trajectory.record import TrialRecord

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")


def test_device_cpu_is_judged_as_the_cpu() -> None:
    device = resolve_device("cpu")
    assert device.kind == "cpu" and device.compute_capability is None


@needs_no_cuda
def test_device_cuda_without_a_gpu_is_refused_with_the_fix(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    with pytest.raises(ValueError, match="--device cpu"):
        resolve_device("cuda")
    with pytest.raises(SettingsError, match="sees no CUDA GPU"):
        Campaign(tiny_settings.model_copy(update={"device": "cuda"}), tmp_path)


def test_a_campaign_judges_the_requested_device(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    campaign = Campaign(tiny_settings.model_copy(update={"device": "cpu"}), tmp_path)
    assert campaign.device == resolve_device("cpu")
    campaign.executor.close()


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
