"""Stop requests (:mod:`recipelab.agent.signals`): the first SIGINT or SIGTERM lets the trials
in flight finish, the second cancels them, and leaving restores the handlers before."""

from __future__ import annotations

import os
import signal

from recipelab.agent.signals import StopRequests


def test_the_first_signal_stops_and_the_second_cancels() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stops = StopRequests()
    with stops.installed():
        assert not stops.stop and not stops.cancel
        os.kill(os.getpid(), signal.SIGTERM)
        assert stops.stop and not stops.cancel
        os.kill(os.getpid(), signal.SIGINT)
        assert stops.stop and stops.cancel
    assert signal.getsignal(signal.SIGTERM) is before
