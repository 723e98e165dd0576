"""Campaign settings as saved in ``settings.json``."""

from __future__ import annotations

from pathlib import Path

from recipelab.agent.settings import CampaignSettings, load, save


def test_a_password_in_the_llm_base_url_is_not_saved(tmp_path: Path) -> None:
    settings = CampaignSettings(name="c", preset="tiny", iterations=1,
                                llm_base_url="http://lab:hunter2@127.0.0.1:8000/v1")
    save(settings, tmp_path)
    assert "hunter2" not in (tmp_path / "settings.json").read_text()
    saved = load(tmp_path)
    assert saved is not None
    assert saved.llm_base_url == "http://lab:[redacted]@127.0.0.1:8000/v1"
