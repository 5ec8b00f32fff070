"""Progress of long rollout calls (pass rates, evaluation, reference caches), by rollout.

A backend generates a whole call in chunks whose seeds depend on the chunk index, so the call
cannot be split to report progress without changing its samples. Instead the meter counts the
rows of each chunk as the backend finishes it (the HF backend's `_generate_rows`; a backend
without chunks, such as vLLM, counts once per `generate`). Nothing else about the call changes.
"""
from __future__ import annotations

import contextlib
import logging

from sparserl.core.logs import progress


@contextlib.contextmanager
def rollout_progress(backend, total: int, desc: str, logger: logging.Logger | None = None,
                     initial: int = 0):
    bar = progress(total, desc, unit="rollout", logger=logger, initial=initial)
    chunked = callable(getattr(backend, "_generate_rows", None))
    name = "_generate_rows" if chunked else "generate"
    own = name in vars(backend)  # an instance attribute to put back, not a method to unshadow
    inner = getattr(backend, name)

    def counted(*args, **kwargs):
        out = inner(*args, **kwargs)
        bar.update(len(args[0]) if chunked else len(out.texts))
        return out

    setattr(backend, name, counted)
    try:
        yield bar
    finally:
        if own:
            setattr(backend, name, inner)
        else:
            delattr(backend, name)
        bar.close()
