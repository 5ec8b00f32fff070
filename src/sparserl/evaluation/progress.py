"""Progress of long rollout calls (pass rates, evaluation, reference caches), by rollout.

A backend generates a whole call in chunks whose seeds depend on the chunk index, so the call
cannot be split to report progress without changing its samples. Instead the meter is the
backend's `on_rows` hook, which it calls with the rows of each chunk it finishes (a backend
without chunks, such as vLLM, calls it once per `generate`). Nothing else about the call changes.
"""
from __future__ import annotations

import contextlib
import logging

from sparserl.core.logs import progress


@contextlib.contextmanager
def rollout_progress(backend, total: int, desc: str, logger: logging.Logger | None = None,
                     initial: int = 0):
    bar = progress(total, desc, unit="rollout", logger=logger, initial=initial)
    before = getattr(backend, "on_rows", None)
    backend.on_rows = bar.update
    try:
        yield bar
    finally:
        backend.on_rows = before
        bar.close()
