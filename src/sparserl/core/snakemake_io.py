"""Snakemake's removal of outputs: with their manifests, and on a folder that can no longer be written.

Snakemake deletes the outputs of a failed job "since they might be corrupted" (and a job's old
outputs before it reruns, and temp files). It knows nothing of the `<name>.manifest.json` beside
each of our tables, which stayed as a manifest without its table; it goes with its table now.
When the folder has turned read-only (a remount, a permission change) Snakemake's `os.remove`
raised, and Snakemake stopped with a raw traceback before it reported the failed job or finished
its other jobs; that is one line naming the output, the cause and the fix now, and Snakemake goes
on as after any failed job. Our writers are atomic, so an output left there is whole, but it is
one of a failed job: the line says to delete it before the rerun. The Snakefile installs both
(`install_removal_hooks`).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from sparserl.core.artifacts import manifest_path, write_fix

__all__ = ["install_removal_hooks", "removal_message"]


def removal_message(path: str | os.PathLike, e: OSError) -> str:
    where = Path(os.fsdecode(path))
    code = errno.errorcode.get(e.errno, str(e.errno))
    return (f"{where}: could not remove this output of the failed job ({os.strerror(e.errno)}, {code}); "
            f"{write_fix(where, e)}, then delete it (`rm -r {where}`) and rerun")


def install_removal_hooks() -> None:
    import snakemake.io as sio
    from snakemake.logging import logger

    inner = sio.remove
    if getattr(inner, "_sparserl", False):
        return

    async def remove(file, *args, **kwargs):
        try:
            await inner(file, *args, **kwargs)
            manifest_path(os.fsdecode(file)).unlink(missing_ok=True)
        except OSError as e:
            if e.errno is None:
                raise
            logger.error(removal_message(file, e))

    remove._sparserl = True
    sio.remove = remove  # _IOFile.remove looks `remove` up in its module at each call
