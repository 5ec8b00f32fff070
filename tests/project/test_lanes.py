"""The two lanes: `pytest -q` runs the fast one (pyproject's addopts deselect the tests marked
e2e), `pytest -q -m e2e` the end-to-end one. A test that runs Snakemake belongs to the e2e lane,
and no fast test asserts a wall-clock time (a loaded machine stretches any bound: the code's own
timeouts bound the work, and timings live in perf/)."""
import ast
import tomllib
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
# a Snakemake run or dry run: `python -m snakemake`, the snakemake command, the sizing's dry run,
# the SLURM plugin's dry run (tests/helpers/slurm_submit.py), perf/gpu_smoke.sh's dry runs
SNAKEMAKE_CALLS = ('"-m", "snakemake"', '["snakemake"', "dry_run_jobs(", "slurm_submit.py", "gpu_smoke.sh")
CLOCKS = {"perf_counter", "monotonic", "time"}


def _marked(decorators, mark: str = "e2e") -> bool:
    return any(f"mark.{mark}" in ast.unparse(d) for d in decorators)


def _functions(tree):
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _reaching(funcs: dict, direct: set) -> set:
    """`direct`, and every function that calls one of them or takes one as a fixture."""
    out, changed = set(direct), True
    while changed:
        changed = False
        for name, f in funcs.items():
            if name in out:
                continue
            called = {c.func.id for c in ast.walk(f) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if (called | {a.arg for a in f.args.args}) & out:
                out.add(name)
                changed = True
    return out


def _module_marked(tree, mark: str = "e2e") -> bool:
    return any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
               and f"mark.{mark}" in ast.unparse(n.value) for n in tree.body)


def snakemake_tests_outside_e2e(src: str, name: str = "<test>") -> list[str]:
    """The tests of a module that run Snakemake (themselves, through a helper or a fixture of
    the module) without the e2e mark."""
    tree = ast.parse(src)
    if _module_marked(tree):
        return []
    lines = src.splitlines()
    funcs = _functions(tree)
    direct = {n for n, f in funcs.items()
              if any(s in line for line in lines[f.lineno - 1:f.end_lineno] for s in SNAKEMAKE_CALLS)}
    return [f"{name}::{n}" for n in sorted(_reaching(funcs, direct))
            if n.startswith("test_") and not _marked(funcs[n].decorator_list)]


DRY = {"-n", "--dry-run", "--dryrun"}


def _two_core_call(call: ast.Call) -> bool:
    """A real Snakemake run on 2 cores (`"--cores", "2"` or `"-j", "2"` among its arguments, no dry
    run), or a Ray cluster of its own (`RAY_ADDRESS` in its environment, `ray.init`)."""
    consts = [a.value for a in ast.walk(call) if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    pairs = set(zip(consts, consts[1:]))
    smk = bool(pairs & {("--cores", "2"), ("-j", "2")}) and not DRY & set(consts)
    ray = "RAY_ADDRESS" in consts or ast.unparse(call.func) == "ray.init"
    return smk or ray


def two_core_tests_unmarked(src: str, name: str = "<test>") -> list[str]:
    """The tests of a module that use both cores (themselves, through a helper or a fixture of the
    module: `_two_core_call`) without the two_cores mark."""
    tree = ast.parse(src)
    if _module_marked(tree, "two_cores"):
        return []
    funcs = _functions(tree)
    direct = {n for n, f in funcs.items() if any(isinstance(c, ast.Call) and _two_core_call(c) for c in ast.walk(f))}
    return [f"{name}::{n}" for n in sorted(_reaching(funcs, direct))
            if n.startswith("test_") and not _marked(funcs[n].decorator_list, "two_cores")]


def _clock_call(node) -> bool:
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in CLOCKS
               and getattr(c.func.value, "id", "") == "time" for c in ast.walk(node))


def wall_clock_asserts(src: str, name: str = "<test>") -> list[str]:
    """'file:line' of each assert of a fast test that reads the clock, directly or through a
    name the test assigned from the clock."""
    tree = ast.parse(src)
    if _module_marked(tree):
        return []
    hits = []
    for f in _functions(tree).values():
        if not f.name.startswith("test_") or _marked(f.decorator_list):
            continue
        timed = {t.id for n in ast.walk(f) if isinstance(n, ast.Assign) and _clock_call(n.value)
                 for t in n.targets if isinstance(t, ast.Name)}
        for a in (n for n in ast.walk(f) if isinstance(n, ast.Assert)):
            names = {n.id for n in ast.walk(a.test) if isinstance(n, ast.Name)}
            if _clock_call(a.test) or names & timed:
                hits.append(f"{name}:{a.lineno}")
    return hits


def _test_files():
    """Every test module but this one (its detector tests hold the patterns as text)."""
    me = Path(__file__).resolve()
    return sorted(p for p in TESTS.rglob("test_*.py") if "helpers" not in p.parts and p.resolve() != me)


def test_the_default_run_is_the_fast_lane_and_e2e_is_registered():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["addopts"] == ["-m", "not e2e", "-n", "auto"], ini.get("addopts")
    assert any(m.startswith("e2e:") for m in ini["markers"]), ini["markers"]
    assert any(m.startswith("two_cores:") for m in ini["markers"]), ini["markers"]


def test_the_detectors_flag_what_they_should():
    run = 'def test_a(tmp_path):\n    subprocess.run([sys.executable, "-m", "snakemake", "-n"])\n'
    via = 'def _smk(*a):\n    return subprocess.run(["snakemake", *a])\n\n\ndef test_b():\n    _smk("-n")\n'
    assert snakemake_tests_outside_e2e(run, "t") == ["t::test_a"]
    assert snakemake_tests_outside_e2e(via, "t") == ["t::test_b"]
    assert snakemake_tests_outside_e2e("@pytest.mark.e2e  # dry run\n" + run) == []
    assert snakemake_tests_outside_e2e("pytestmark = pytest.mark.e2e\n" + via) == []
    timed = "def test_c():\n    t0 = time.perf_counter()\n    go()\n    wall = time.perf_counter() - t0\n    assert wall < 2\n"
    inline = "def test_d():\n    t = time.monotonic()\n    go()\n    assert time.monotonic() - t < 15\n"
    assert wall_clock_asserts(timed, "t") == ["t:5"] and wall_clock_asserts(inline, "t") == ["t:4"]
    assert wall_clock_asserts("@pytest.mark.e2e\n" + timed) == []
    assert wall_clock_asserts("def test_e():\n    deadline = time.monotonic() + 5\n    assert go(deadline)\n") \
        == ["<test>:3"]  # a deadline asserted on is a bound too
    assert wall_clock_asserts("def test_f():\n    assert go(timeout_s=0.5) == 'timeout'\n") == []


def test_tests_that_run_snakemake_are_in_the_e2e_lane():
    hits = [h for p in _test_files() for h in snakemake_tests_outside_e2e(p.read_text(), str(p.relative_to(REPO)))]
    assert hits == [], "these run Snakemake; mark them @pytest.mark.e2e:\n" + "\n".join(hits)


def test_tests_that_use_both_cores_are_marked_two_cores():
    hits = [h for p in _test_files() for h in two_core_tests_unmarked(p.read_text(), str(p.relative_to(REPO)))]
    assert hits == [], ("these run Snakemake on 2 cores or a Ray cluster; mark them "
                        "@pytest.mark.two_cores (they then run alone):\n" + "\n".join(hits))


def test_the_two_cores_detector_flags_real_runs_and_ray_not_dry_runs():
    run = 'def _smk(*a):\n    return subprocess.run(["snakemake", *a])\n\n\ndef test_a():\n    _smk("--cores", "2", "all")\n'
    assert two_core_tests_unmarked(run, "t") == ["t::test_a"]
    assert two_core_tests_unmarked(run.replace('"all"', '"-n", "all"')) == []
    assert two_core_tests_unmarked(run.replace("def test_a", "@pytest.mark.two_cores\ndef test_a")) == []
    ray = 'def test_b():\n    subprocess.run(cmd, env={**os.environ, "RAY_ADDRESS": "local"})\n'
    assert two_core_tests_unmarked(ray, "t") == ["t::test_b"]
    assert two_core_tests_unmarked("pytestmark = [pytest.mark.e2e, pytest.mark.two_cores]\n" + ray) == []
    assert two_core_tests_unmarked('def test_c():\n    ray.init(num_cpus=2)\n', "t") == ["t::test_c"]


def test_no_fast_test_asserts_a_wall_clock_time():
    hits = [h for p in _test_files() for h in wall_clock_asserts(p.read_text(), str(p.relative_to(REPO)))]
    assert hits == [], ("fast tests asserting on elapsed time; bound the work by a timeout the code "
                        "enforces, assert on its outcome, or time it in perf/:\n" + "\n".join(hits))


def test_a_two_cores_test_waits_for_the_others_and_goes_before_later_ones(tmp_path):
    """tests/helpers/cores.py: one-core tests share the machine; a two_cores one waits for them to
    end, and a one-core test that comes after it waits for it (no starvation)."""
    import fcntl
    import threading
    import time
    from helpers.cores import cores
    order, held = [], threading.Event()

    def hold(name, whole, started=None, wait=0.0):
        with cores(tmp_path, whole):
            order.append(f"{name}+")
            if started:
                started.set()
            time.sleep(wait)
            order.append(f"{name}-")
    first = threading.Thread(target=hold, args=("one", False, held, 0.6))
    first.start()
    held.wait(5)
    two = threading.Thread(target=hold, args=("two", True, None, 0.3))
    two.start()
    with open(tmp_path / "turnstile", "a") as turn:  # wait until `two` holds the turnstile, waiting for `one`
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                break
            fcntl.flock(turn, fcntl.LOCK_UN)
            time.sleep(0.01)
    later = threading.Thread(target=hold, args=("later", False))
    later.start()
    for t in (first, two, later):
        t.join(10)
    assert order == ["one+", "one-", "two+", "two-", "later+", "later-"], order
    beside = []

    def other():
        with cores(tmp_path, False):
            beside.append("in")
    with cores(tmp_path, False):  # one-core tests run side by side
        t = threading.Thread(target=other)
        t.start()
        t.join(5)
        assert beside == ["in"]
