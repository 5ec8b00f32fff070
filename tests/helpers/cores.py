"""The machine's cores, shared between pytest-xdist workers (tests/conftest.py)."""
import fcntl
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def cores(folder: Path, whole: bool):
    """Hold the machine's cores: shared by one-core tests, whole for a two_cores one. A turnstile
    keeps a waiting whole-machine test from starving while one-core tests come and go."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "turnstile", "a") as turn, open(folder / "cores", "a") as held:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(held, fcntl.LOCK_EX if whole else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
