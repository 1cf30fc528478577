"""What a benchmark run shows while it runs (rank 0): a tqdm bar on a terminal, else a log line every tenth case and
at least every HEARTBEAT_S seconds, in the middle of a long case too; each with the time left by the estimate."""
from __future__ import annotations

import logging
import sys
import time
from typing import Sequence

log = logging.getLogger("primus_hydra.benchmark")

HEARTBEAT_S = 10.0
BAR_REFRESH_S = 0.5


def duration_text(seconds: float) -> str:
    """`<1 s`, `42 s`, `3 min 5 s`, `2 h 10 min`."""
    if seconds < 1:
        return "<1 s"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


class Progress:
    """estimates: each case's expected seconds, in the order they run (the time left scales them by how the
    finished cases compared with theirs)."""

    def __init__(self, main: bool, suite: str, estimates: Sequence[float]):
        self.main, self.suite, self.estimates = main, suite, list(estimates)
        self.total, self.done, self.label, self.bar = len(self.estimates), 0, "", None
        self.call, self.calls, self.in_case, self.elapsed_done = 0, 0, False, 0.0
        self.started = self.case_started = self.last_line = time.monotonic()

    def __enter__(self) -> "Progress":
        if self.main and sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=self.total, desc=f"benchmark {self.suite}", unit="case")
            except ImportError:
                self.bar = None
        return self

    def start(self, label: str, calls: int) -> None:
        """A case begins: `calls` timed or warm-up calls (a repetition of an attention case is several)."""
        self.label, self.call, self.calls, self.case_started, self.in_case = label, 0, calls, time.monotonic(), True

    def tick(self) -> None:
        """After every call of the current case."""
        self.call += 1
        if not self.main:
            return
        if self.bar is not None:
            if time.monotonic() - self.last_line >= BAR_REFRESH_S:
                self.last_line = time.monotonic()
                self.bar.set_postfix_str(f"{self.label}, call {self.call}/{self.calls}")
        elif time.monotonic() - self.last_line >= HEARTBEAT_S:
            self._line(f"case {self.done + 1}/{self.total} ({self.label}), call {self.call}/{self.calls}")

    def finish(self) -> None:
        self.done, self.in_case = self.done + 1, False
        self.elapsed_done = time.monotonic() - self.started
        if not self.main:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(self.label, refresh=False)
            self.bar.update(1)
        elif self.done % max(1, self.total // 10) == 0 or self.done == self.total:
            self._line(f"{self.done}/{self.total} ({self.label})")

    def left_s(self) -> float:
        expected_so_far = sum(self.estimates[: self.done])
        scale = self.elapsed_done / expected_so_far if self.done and expected_so_far > 0 else 1.0
        if self.done == self.total:
            return 0.0
        running = time.monotonic() - self.case_started if self.in_case else 0.0
        current = max(0.0, scale * self.estimates[self.done] - running)
        return current + scale * sum(self.estimates[self.done + 1:])

    def _line(self, what: str) -> None:
        self.last_line = time.monotonic()
        elapsed = duration_text(self.last_line - self.started)
        left = "" if self.done == self.total else f", about {duration_text(self.left_s())} left"
        log.info("benchmark %s: %s, %s elapsed%s", self.suite, what, elapsed, left)

    def __exit__(self, *exc) -> bool:
        if self.bar is not None:
            self.bar.close()
        return False
