"""Snakemake's removal of a failed job's outputs, on a folder that can no longer be written.

Snakemake deletes the outputs of a failed job "since they might be corrupted". When the folder has
turned read-only (a remount, a permission change) that `os.remove` raises, and Snakemake stops
with a raw traceback before it reports the failed job or finishes its other jobs. Installed by the
Snakefile, `name_failed_removals` makes that one line naming the output, the cause and the fix;
Snakemake then goes on as after any failed job. Our writers are atomic, so an output left there
is whole, but it is one of a failed job: the line says to delete it before the rerun.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from sparserl.core.artifacts import write_fix

__all__ = ["name_failed_removals", "removal_message"]


def removal_message(path: str | os.PathLike, e: OSError) -> str:
    where = Path(os.fsdecode(path))
    code = errno.errorcode.get(e.errno, str(e.errno))
    return (f"{where}: could not remove this output of the failed job ({os.strerror(e.errno)}, {code}); "
            f"{write_fix(where, e)}, then delete it (`rm -r {where}`) and rerun")


def name_failed_removals() -> None:
    import snakemake.io as sio
    from snakemake.logging import logger

    inner = sio.remove
    if getattr(inner, "_sparserl", False):
        return

    async def remove(file, *args, **kwargs):
        try:
            return await inner(file, *args, **kwargs)
        except OSError as e:
            if e.errno is None:
                raise
            logger.error(removal_message(file, e))

    remove._sparserl = True
    sio.remove = remove  # _IOFile.remove looks `remove` up in its module at each call
