"""A plain-text progress bar (no dependency): redrawn in place on a terminal, a line per tenth elsewhere (a log or a
pipe gets a readable record rather than carriage returns)."""

from __future__ import annotations

import sys


class Progress:
    def __init__(self, label: str, total: int, unit: str, stream=None, width: int = 30):
        self.label, self.total, self.unit, self.width = label, max(total, 1), unit, width
        self.stream = stream or sys.stdout
        self.done = 0
        self._live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._tenths_shown = -1

    def advance(self, n: int = 1) -> None:
        self.done += n
        # A total counted beforehand can fall short of what happens (it is an estimate where the caller says so).
        self.total = max(self.total, self.done)
        tenths = self.done * 10 // self.total
        if self._live:
            self.stream.write("\r" + self._line())
            self.stream.flush()
        elif tenths > self._tenths_shown:
            self._tenths_shown = tenths
            self.stream.write(self._line() + "\n")

    def close(self) -> None:
        """The final state, total = what was done."""
        self.total = max(self.done, 1)
        if self._live:
            self.stream.write("\r" + self._line() + "\n")
        elif self._tenths_shown < 10:
            self.stream.write(self._line() + "\n")
        self.stream.flush()

    def _line(self) -> str:
        filled = self.done * self.width // self.total
        return (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {100 * self.done // self.total:3d}% "
                f"{self.done}/{self.total} {self.unit}")
