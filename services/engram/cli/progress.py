"""Progress bars (rich) on stderr for long commands: import, export, `reindex --wait`.

They draw only when stderr is a terminal, so scripts, pipes (`export --out -`) and `--json`
output stay clean.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from engram.cli.client import err_console


@contextmanager
def transfer_progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A bar of bytes moved (size, rate, and an ETA when `total` is known); yields the
    function that reports bytes done."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    )
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda done: progress.advance(task, done)


@contextmanager
def count_progress(description: str, total: int) -> Iterator[Callable[..., None]]:
    """A bar of items done out of `total`, with the rate per second and an ETA; yields the
    function that sets how many are done (and, optionally, a new total)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
        disable=not err_console.is_terminal,
    )
    with progress:
        task = progress.add_task(description, total=total, rate="")

        def update(done: int, total: int | None = None) -> None:
            progress.update(task, completed=done, total=total)
            speed = progress.tasks[task].speed
            progress.update(task, rate=f"{speed:,.0f}/s" if speed else "")

        yield update
