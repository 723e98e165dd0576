"""The proposer package's public surface: the registry and the re-exports."""

from __future__ import annotations

import recipelab.proposer as proposer


def test_registry_names_the_classical_proposer() -> None:
    assert proposer.PROPOSERS["classical"] is proposer.ClassicalProposer


def test_all_exports_exist() -> None:
    expected = {"Proposer", "Proposal", "Observation", "ClassicalProposer", "SearchSpace",
                "Knob", "default_space", "PROPOSERS"}
    assert expected <= set(proposer.__all__)
    assert all(hasattr(proposer, name) for name in proposer.__all__)

