"""Campaign settings as saved in ``settings.json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from recipelab.agent.setup.settings import (
    COMPONENTS,
    FLAT_KEYS,
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    ProposerSettings,
    SettingsError,
    StoreSettings,
    WindowSettings,
    check_resume,
    load,
    save,
)


def test_a_password_in_the_llm_base_url_is_not_saved(tmp_path: Path) -> None:
    settings = CampaignSettings(
        name="c", preset="tiny", window=WindowSettings(iterations=1),
        proposer=ProposerSettings(llm_base_url="http://lab:hunter2@127.0.0.1:8000/v1"),
        store=StoreSettings(mlflow_uri="http://ann:hunter2@mlflow:5000"))
    save(settings, tmp_path)
    assert "hunter2" not in (tmp_path / "settings.json").read_text()
    saved = load(tmp_path)
    assert saved is not None
    assert saved.proposer.llm_base_url == "http://lab:[redacted]@127.0.0.1:8000/v1"
    assert saved.store.mlflow_uri == "http://ann:[redacted]@mlflow:5000"


def test_settings_saved_before_campaigns_had_one_precision_load_with_the_presets(
    tmp_path: Path,
) -> None:
    """Their baseline trained in the preset's precision; a resume must not move it."""
    data = json.loads(CampaignSettings(name="old", preset="tiny", precision="bf16",
                                       executor=ExecutorSettings(parallel=1)).model_dump_json())
    del data["precision"]
    (tmp_path / "settings.json").write_text(json.dumps(data))
    loaded = load(tmp_path)
    assert loaded is not None and loaded.precision == "fp32"


def test_a_resume_may_not_change_the_precision() -> None:
    saved = CampaignSettings(name="c", precision="bf16", executor=ExecutorSettings(parallel=2))
    with pytest.raises(SettingsError, match=r"precision: saved 'bf16', asked 'fp32'"):
        check_resume(saved, saved.model_copy(update={"precision": "fp32"}))
    check_resume(saved, saved.model_copy(update={"parallel": 1}))  # trials in flight may


def test_a_resume_may_not_change_the_seed() -> None:
    """The seed is the baseline's and every candidate's (common random numbers): trials after
    a change would pair with nothing before it."""
    saved = CampaignSettings(name="c", seed=0, executor=ExecutorSettings(parallel=2))
    with pytest.raises(SettingsError, match=r"seed: saved 0, asked 7"):
        check_resume(saved, saved.model_copy(update={"seed": 7}))


def test_settings_that_are_not_json_say_so(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text("{not json")
    with pytest.raises(SettingsError, match="not valid campaign settings: not JSON"):
        load(tmp_path)


FLAT_FILE = Path(__file__).parent / "flat_settings.json"
"""settings.json as ``save`` wrote it before the settings had components (recipelab at
bf71393): every field at the top level, a value other than the default in most of them."""


def test_a_flat_settings_file_from_before_the_components_resumes(tmp_path: Path) -> None:
    """Every flat key lands in the component that now holds its field, and the next save
    writes the nested form, which loads to the same settings."""
    flat = json.loads(FLAT_FILE.read_text())
    (tmp_path / "settings.json").write_text(FLAT_FILE.read_text())
    loaded = load(tmp_path)
    assert loaded is not None
    nested = loaded.model_dump(mode="json")
    for key, value in flat.items():
        component, field = FLAT_KEYS.get(key, (None, key))
        assert (nested[component][field] if component else nested[key]) == value, key
    check_resume(loaded, loaded.model_copy(update={"iterations": 80}))  # a resume may go on

    save(loaded, tmp_path)
    saved = json.loads((tmp_path / "settings.json").read_text())
    assert set(saved) == set(CampaignSettings.model_fields), "saved nested, by component"
    assert saved["ladder"]["stress_log_every"] == 25 and saved["proposer"]["kind"] == "hybrid"
    assert load(tmp_path) == loaded


def test_flat_keys_are_derived_from_the_components_fields() -> None:
    """Each component field has one flat spelling, its name (``kind``: the component's), and
    none shadows a top-level field: a new field needs no entry in a hand-written list."""
    expected = {("proposer" if (c, f) == ("proposer", "kind") else "executor"
                 if (c, f) == ("executor", "kind") else f): (c, f)
                for c, model in COMPONENTS.items() for f in model.model_fields}
    assert expected == FLAT_KEYS
    identity = set(CampaignSettings.model_fields) - set(COMPONENTS)
    assert not identity & set(FLAT_KEYS)


def test_flat_keyword_input_takes_the_same_path_as_an_old_file() -> None:
    flat = CampaignSettings.model_validate({"name": "c", "promote": 0, "proposer": "llm",
                                            "parallel": 2, "ladder": {"eta": 2}})
    assert flat == CampaignSettings(name="c", ladder=LadderSettings(promote=0, eta=2),
                                    proposer=ProposerSettings(kind="llm"),
                                    executor=ExecutorSettings(parallel=2))


def test_a_copy_with_a_flat_key_changes_its_component_and_is_validated() -> None:
    """pydantic's own ``model_copy`` validates nothing: a flat key would have set an
    attribute nothing reads, and a bad value would have passed."""
    settings = CampaignSettings(name="c", ladder=LadderSettings(promote=2, eta=4))
    copied = settings.model_copy(update={"promote": 0})
    assert copied.ladder == LadderSettings(promote=0, eta=4)
    assert "promote" not in copied.__dict__
    assert settings.model_copy(update={"ladder": {"eta": 2}}).ladder == LadderSettings(promote=2, eta=2)
    assert settings.model_copy(update={"ladder": LadderSettings()}).ladder == LadderSettings()
    with pytest.raises(ValidationError, match="promte"):
        settings.model_copy(update={"promte": 0})
    with pytest.raises(ValidationError, match="eta"):
        settings.model_copy(update={"eta": 1})
