"""Campaign settings as saved in ``settings.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipelab.agent.settings import CampaignSettings, SettingsError, check_resume, load, save


def test_a_password_in_the_llm_base_url_is_not_saved(tmp_path: Path) -> None:
    settings = CampaignSettings(name="c", preset="tiny", iterations=1,
                                llm_base_url="http://lab:hunter2@127.0.0.1:8000/v1")
    save(settings, tmp_path)
    assert "hunter2" not in (tmp_path / "settings.json").read_text()
    saved = load(tmp_path)
    assert saved is not None
    assert saved.llm_base_url == "http://lab:[redacted]@127.0.0.1:8000/v1"


def test_settings_saved_before_campaigns_had_one_precision_load_with_the_presets(
    tmp_path: Path,
) -> None:
    """Their baseline trained in the preset's precision; a resume must not move it."""
    data = json.loads(CampaignSettings(name="old", preset="tiny", parallel=1,
                                       precision="bf16").model_dump_json())
    del data["precision"]
    (tmp_path / "settings.json").write_text(json.dumps(data))
    loaded = load(tmp_path)
    assert loaded is not None and loaded.precision == "fp32"


def test_a_resume_may_not_change_the_precision() -> None:
    saved = CampaignSettings(name="c", parallel=2, precision="bf16")
    with pytest.raises(SettingsError, match=r"precision: saved 'bf16', asked 'fp32'"):
        check_resume(saved, saved.model_copy(update={"precision": "fp32"}))
    check_resume(saved, saved.model_copy(update={"parallel": 1}))  # trials in flight may


def test_settings_that_are_not_json_say_so(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text("{not json")
    with pytest.raises(SettingsError, match="not valid campaign settings: not JSON"):
        load(tmp_path)
