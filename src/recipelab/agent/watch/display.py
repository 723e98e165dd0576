"""The live progress line under the event log, shown only on a terminal."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class CampaignProgress:
    """Iteration count, ETA, best val_bpb so far and the current trial.

    On anything but a terminal (a log file, CI, ``nohup``) it does nothing: the event lines
    already say everything, and a progress bar would only garble them.
    """

    def __init__(self, console: Console, total: int | None) -> None:
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]proxy trials"), BarColumn(bar_width=20), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                TextColumn("{task.fields[best]}  {task.fields[current]}"),
                console=console)
            self._task = self._progress.add_task("campaign", total=total, best="", current="")

    def update(self, completed: int, best: float | None, current: str | None) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, completed=completed,
                              best=f"best val_bpb {best:.4f}" if best is not None else "",
                              current=f"now: {current}" if current else "")

    def __enter__(self) -> CampaignProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
