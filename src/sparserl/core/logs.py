"""One log format for every command, and progress bars that stay out of Snakemake's job logs.

`setup_logging()` runs once in the CLI's main; library code asks `get_logger(__name__)`.
`progress(total, desc)` draws a tqdm bar with an ETA when stderr is a terminal; when it is not (a
Snakemake job writes stderr to its log file) it logs a line with the same ETA every few updates
instead, so logs stay readable. Neither draws random numbers or touches the computation: the
tiny DAG's tables are the same with and without a terminal.
"""
from __future__ import annotations

import logging
import os
import sys
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATEFMT = "%Y-%m-%d %H:%M:%S"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (tests and tqdm swap it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def setup_logging(level: int | str | None = None) -> None:
    """Configure the `sparserl` logger once: FORMAT on stderr; level from SPARSERL_LOG_LEVEL."""
    level = level or os.environ.get("SPARSERL_LOG_LEVEL", "INFO")
    root = logging.getLogger("sparserl")
    root.setLevel(level)
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        h = _StderrHandler()
        h.setFormatter(logging.Formatter(FORMAT, DATEFMT))
        root.addHandler(h)


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name if name.startswith("sparserl") else f"sparserl.{name}")


def interactive() -> bool:
    """Draw bars only for a person at a terminal (SPARSERL_PROGRESS=0/1 overrides)."""
    forced = os.environ.get("SPARSERL_PROGRESS")
    if forced is not None:
        return forced not in ("0", "", "false", "no")
    return sys.stderr.isatty()


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class _LogProgress:
    """tqdm's update/set_postfix_str/close, as a log line every `every` units (and the last)."""

    def __init__(self, total: int, desc: str, unit: str, logger: logging.Logger,
                 every: int | None, initial: int = 0):
        self.total, self.desc, self.unit, self.logger = int(total), desc, unit, logger
        self.every = every or max(1, self.total // 10)
        self.n = self.base = initial  # a resumed loop: the ETA counts only units timed here
        self.t0, self.postfix, self._next = time.monotonic(), "", initial + self.every

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.n >= self._next or self.n >= self.total:
            while self._next <= self.n:
                self._next += self.every
            el = time.monotonic() - self.t0
            done = self.n - self.base
            eta = el / done * max(0, self.total - self.n) if done > 0 else 0.0
            extra = f" {self.postfix}" if self.postfix else ""
            self.logger.info(f"{self.desc}: {self.n}/{self.total} {self.unit}s{extra} "
                             f"[{_fmt_s(el)} elapsed, ETA {_fmt_s(eta)}]")

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(total: int, desc: str, unit: str = "step", logger: logging.Logger | None = None,
             every: int | None = None, initial: int = 0):
    """A progress meter: a tqdm bar on a terminal, else a log line every `every` units."""
    if interactive():
        from tqdm.auto import tqdm
        return tqdm(total=total, desc=desc, unit=unit, initial=initial, file=sys.stderr,
                    dynamic_ncols=True, mininterval=0.5)
    return _LogProgress(total, desc, unit, logger or get_logger("sparserl.progress"), every, initial)
