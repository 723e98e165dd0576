"""A Ray head node that is not there is said at once, in one error with the fix (Ray itself
retries it for minutes). No Ray cluster runs here: the executor must not reach ``ray.init``."""

from __future__ import annotations

import socket

import pytest

from recipelab.runner.ray import RayExecutor, RayUnavailable


def test_an_address_where_nothing_answers_is_refused_at_once_with_the_fix() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(RayUnavailable, match="nothing answers there") as error:
            RayExecutor(address=f"127.0.0.1:{port}")
    assert "ray start --head" in str(error.value)
