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


def two_cores_first(items: list) -> None:
    """Put the tests marked two_cores first, each group in its collection order. pytest-xdist hands
    the first tests out round robin, so both workers start on them: they take the machine in
    turn, and none waits for a long one-core test on the other worker to end."""
    items.sort(key=lambda item: item.get_closest_marker("two_cores") is None)
