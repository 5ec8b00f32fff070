import os
import sys
import tempfile
from pathlib import Path

import pytest

from helpers.cores import cores

REPO = Path(__file__).resolve().parents[1]

# Both lanes run on one pytest-xdist worker per core (pyproject's addopts: -n auto). A worker's
# torch, OpenMP and BLAS get one thread each, so workers x threads stay within the cores; a test
# marked two_cores (a Snakemake run with --cores 2, Ray, a worker pool) gets the usual threads and
# runs while no other test does. `-n 0` runs a lane in one process, as before.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_OWN_THREADS = {k: os.environ.get(k) for k in THREAD_VARS}
if WORKER:
    os.environ.update({k: "1" for k in THREAD_VARS})  # before torch is imported: OpenMP sizes its pool then


def _threads(env: dict) -> None:
    """Set the thread variables to `env`'s values (None: unset) and torch's count to match."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if "torch" in sys.modules:
        n = env.get("OMP_NUM_THREADS")
        sys.modules["torch"].set_num_threads(int(n) if n else len(os.sched_getaffinity(0)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not WORKER:
        yield
        return
    whole = item.get_closest_marker("two_cores") is not None
    run = item.config.workerinput["testrunuid"]
    with cores(Path(tempfile.gettempdir()) / f"sparserl-pytest-{run}", whole):
        if whole:
            _threads(_OWN_THREADS)
        try:
            yield
        finally:
            if whole:
                _threads({k: "1" for k in THREAD_VARS})


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.fixture(autouse=True)
def _no_ray_left_running():
    """A test must not leave Ray running in the test process: ray.get or .remote() starts a local
    Ray when none is, and every later Ray test in that process skipped ("Ray already initialised")."""
    before = _ray_running()
    yield
    if not before and _ray_running():
        sys.modules["ray"].shutdown()
        pytest.fail("this test left Ray running in the test process (ray.get or .remote() starts one): "
                    "stub them (fixture no_ray) or shut Ray down in the test", pytrace=False)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def umask022():
    """The usual umask, so a test can check the 0644/0755 modes whatever the runner's umask."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory):
    """A random 2-layer Qwen3 policy and a BPE tokenizer trained on a few arithmetic prompts."""
    import torch
    from sparserl.models.policies import build_model
    from sparserl.models.tokenizer import train_tokenizer

    texts = [f"Q: {a} + {b} =\nA: \\boxed{{{a + b}}}" for a in range(10) for b in range(10)]
    tok = train_tokenizer(texts * 3, 120, tmp_path_factory.mktemp("tok") / "tokenizer", 24)
    torch.manual_seed(0)
    pol = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "ffn_size": 64}
    model = build_model(pol, tok, 24)
    model.eval()
    return model, tok
