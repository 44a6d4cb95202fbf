"""A live progress bar (rich) for a batch run: done/total, items/s, tokens/s, ETA, failures."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from .report import RunStats


class RichProgress:
    """``ProgressSink`` drawing on stderr; rates count only the items processed in this run."""

    def __init__(self, console: Console | None = None, description: str = "batch") -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[tokens]}"),
            TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[failed]}"),
            console=console or Console(stderr=True), refresh_per_second=4, transient=False,
        )
        self._description = description
        self._task: TaskID | None = None

    def start(self, total: int, completed: int) -> None:
        self._task = self._progress.add_task(self._description, total=total, completed=completed,
                                             rate="0.0 items/s", tokens="0 tok/s", failed="failed 0")
        self._progress.start()

    def update(self, stats: RunStats, completed: int) -> None:
        if self._task is None:
            return
        elapsed = max(stats.elapsed, 1e-9)
        self._progress.update(self._task, completed=completed,
                              rate=f"{stats.processed / elapsed:.1f} items/s",
                              tokens=f"{stats.tokens / elapsed:.0f} tok/s",
                              failed=f"failed {stats.failed}")

    def stop(self) -> None:
        self._progress.stop()
