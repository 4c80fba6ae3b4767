"""Progress of the long commands: a bar (or a status line) on a terminal, plain lines otherwise.

``Progress(label, total)``: ``update(done, status)`` redraws a rich bar when stderr is a
terminal; when it is not (a log file, ``make main | tee``), it prints a plain line each time
another ``1 / lines`` of the total is done (``plain=True``) or nothing (``plain=False``). The
bar is transient: it leaves no trace in the terminal's scrollback. ``LogStatus`` shows the last
INFO message of a logger (a stage that finished) as a status line, for stages with no step count.
``UserFormatter``: a log line as the user reads it (``warning: ...``, no logger name).
rich is imported only when a terminal shows something.
"""

from __future__ import annotations

import logging
import sys
import time


def on_terminal(stream=None) -> bool:
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """A step counter shown as a bar on a terminal, as plain periodic lines elsewhere (see the module)."""

    def __init__(self, label: str, total: int, start: int = 0, *, enabled: bool = True, plain: bool = True,
                 lines: int = 20, stream=None) -> None:
        self.label, self.total, self.stream = label, max(int(total), 1), stream or sys.stderr
        self.bar = self.task = None
        self.t0, self.start = time.perf_counter(), start
        self.plain = enabled and plain and not on_terminal(self.stream)
        self.every = max(1, self.total // max(lines, 1))
        self.next = (start // self.every + 1) * self.every
        if enabled and on_terminal(self.stream):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                           TextColumn("{task.fields[status]}"), transient=True,
                           console=Console(file=self.stream, force_terminal=True))
            self.bar.start()
            self.task = self.bar.add_task(label, total=self.total, completed=start, status="")

    def update(self, done: int, status: str = "") -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, status=status)
        elif self.plain and (done >= self.next or done == self.total):
            self.next = (done // self.every + 1) * self.every
            elapsed = time.perf_counter() - self.t0
            rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
            left = f", about {(self.total - done) / rate:.0f} s left" if rate > 0 and done < self.total else ""
            print(f"{self.label} {done}/{self.total} ({100.0 * done / self.total:.0f}%)"
                  f"{'  ' + status if status else ''}  [{elapsed:.0f} s{left}]", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LogStatus(logging.Handler):
    """On a terminal, a transient status line with a spinner: ``label``, the elapsed time and the last
    INFO message of ``logger`` (the stage that just finished). Nothing elsewhere."""

    def __init__(self, label: str, logger: str, stream=None) -> None:
        super().__init__(logging.INFO)
        self.label, self.logger, self.stream, self.status = label, logging.getLogger(logger), stream, None
        self.level_before = self.logger.level

    def __enter__(self) -> "LogStatus":
        stream = self.stream or sys.stderr
        if on_terminal(stream):
            from rich.console import Console

            self.t0 = time.perf_counter()
            self.status = Console(file=stream, force_terminal=True).status(f"{self.label} ...")
            self.status.start()
            self.logger.addHandler(self)
            if self.logger.getEffectiveLevel() > logging.INFO:
                self.logger.setLevel(logging.INFO)  # records reach this handler; the root handler keeps its level
        return self

    def emit(self, record: logging.LogRecord) -> None:
        if self.status is not None:
            message = " ".join(record.getMessage().split())
            self.status.update(f"{self.label} [{time.perf_counter() - self.t0:.0f} s]: {message}")

    def __exit__(self, *exc) -> None:
        if self.status is not None:
            self.status.stop()
            self.logger.removeHandler(self)
            self.logger.setLevel(self.level_before)


class UserFormatter(logging.Formatter):
    """A log line as a user reads it: ``warning: ...`` (the level in lower case, as the command line's
    ``error: ...``) and no logger name, which names a module of the library, not anything the user did."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {super().format(record)}"  # the message (and a traceback logged)
