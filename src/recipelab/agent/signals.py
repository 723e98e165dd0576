"""Stop requests: SIGINT/SIGTERM end a campaign gently, a second one at once."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class StopRequests:
    """The first signal lets the trials in flight finish; the second cancels them."""

    def __init__(self) -> None:
        self.count = 0

    @property
    def stop(self) -> bool:
        return self.count >= 1

    @property
    def cancel(self) -> bool:
        return self.count >= 2

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.count += 1

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
