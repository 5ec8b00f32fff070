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


def _is_e2e(decorators) -> bool:
    return any("mark.e2e" in ast.unparse(d) for d in decorators)


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


def _module_e2e(tree) -> bool:
    return any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
               and "mark.e2e" in ast.unparse(n.value) for n in tree.body)


def snakemake_tests_outside_e2e(src: str, name: str = "<test>") -> list[str]:
    """The tests of a module that run Snakemake (themselves, through a helper or a fixture of
    the module) without the e2e mark."""
    tree = ast.parse(src)
    if _module_e2e(tree):
        return []
    lines = src.splitlines()
    funcs = _functions(tree)
    direct = {n for n, f in funcs.items()
              if any(s in line for line in lines[f.lineno - 1:f.end_lineno] for s in SNAKEMAKE_CALLS)}
    return [f"{name}::{n}" for n in sorted(_reaching(funcs, direct))
            if n.startswith("test_") and not _is_e2e(funcs[n].decorator_list)]


def _clock_call(node) -> bool:
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in CLOCKS
               and getattr(c.func.value, "id", "") == "time" for c in ast.walk(node))


def wall_clock_asserts(src: str, name: str = "<test>") -> list[str]:
    """'file:line' of each assert of a fast test that reads the clock, directly or through a
    name the test assigned from the clock."""
    tree = ast.parse(src)
    if _module_e2e(tree):
        return []
    hits = []
    for f in _functions(tree).values():
        if not f.name.startswith("test_") or _is_e2e(f.decorator_list):
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
    assert ini["addopts"] == ["-m", "not e2e"], ini.get("addopts")
    assert any(m.startswith("e2e:") for m in ini["markers"]), ini["markers"]


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


def test_no_fast_test_asserts_a_wall_clock_time():
    hits = [h for p in _test_files() for h in wall_clock_asserts(p.read_text(), str(p.relative_to(REPO)))]
    assert hits == [], ("fast tests asserting on elapsed time; bound the work by a timeout the code "
                        "enforces, assert on its outcome, or time it in perf/:\n" + "\n".join(hits))
