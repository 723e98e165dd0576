"""The campaign builds its proposer from one registry, whose names are the ones ``--proposer``
accepts and the proposer package registers."""

from __future__ import annotations

from typing import get_args

from recipelab import proposer
from recipelab.agent.setup.proposer_choice import PROPOSER_BUILDERS
from recipelab.agent.setup.settings import ProposerSettings


def test_every_proposer_the_settings_name_is_built_from_the_registry() -> None:
    names = set(get_args(get_args(ProposerSettings.model_fields["kind"].annotation)[0]))
    assert set(PROPOSER_BUILDERS) == names == set(proposer.PROPOSERS)
