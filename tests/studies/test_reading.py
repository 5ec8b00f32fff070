"""The reading of a scale's results (sparserl.studies.reading, rule `reading`): made from the claims
CSV and the head-to-head tables alone, its sentences follow their statuses and intervals, its
numbers are their cells, and a missing table is one line naming it."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sparserl.core.artifacts import write_table
from sparserl.studies import reading as R


def _claims(status_basis: str = "reproduced") -> pd.DataFrame:
    row = dict(claim="c", paper_number="", paper_lo=np.nan, paper_hi=np.nan, ci_method="m", detail="",
               measured_over_paper=np.nan, scale="tiny", direction_status="", magnitude_status="",
               detectable=np.nan, target="t", sources="s", reason="", premise="", premise_status="")
    return pd.DataFrame([
        {**row, "id": "basis.rl_vs_grpo8", "paper": "BASIS", "quantity": "accuracy(BASIS) - accuracy(GRPO G=8)",
         "relation": ">", "threshold": -0.0087, "measured": 0.04731, "ci_lo": 0.01218, "ci_hi": 0.08264,
         "status": status_basis, "premise": "GRPO G=8's gain over the start policy +0.037 [+0.022, +0.053]",
         "premise_status": "present"},
        {**row, "id": "basis.rl_vs_vanilla", "paper": "BASIS", "quantity": "accuracy(BASIS) - accuracy(vanilla)",
         "relation": ">", "threshold": 0.0, "measured": -0.02046, "ci_lo": -0.03012, "ci_hi": -0.01077,
         "status": "premise absent", "premise": "vanilla GRPO G=1 collapses: +0.062 [+0.046, +0.078]",
         "premise_status": "absent"},
        {**row, "id": "v05.osla_vs_grpo16", "paper": "V0.5", "quantity": "accuracy(V0.5 OSLA) - accuracy(GRPO G=16)",
         "relation": ">", "threshold": 0.0, "measured": 0.00712, "ci_lo": -0.00345, "ci_hi": 0.01781,
         "status": "inconclusive"},
        {**row, "id": "v0.budget_allocation", "paper": "V0", "quantity": "accuracy(V0 budget) - accuracy(GRPO G=8)",
         "relation": ">", "threshold": 0.0, "measured": np.nan, "ci_lo": np.nan, "ci_hi": np.nan,
         "status": "not run at this scale", "reason": "rl.methods of this config lacks grpo_budget_v0"},
    ])


# (method, run, rank, accuracy, lo, hi, gain, lo, hi, pass gain, lo, hi)
RANKING = [
    ("vanilla_g1", "vanilla_g1", 1, 0.48411, 0.46096, 0.50616, 0.06176, 0.04489, 0.07732, 0.00315, -0.02188, 0.02935),
    ("positive_only_g1", "vanilla_g1", 1, 0.48411, 0.46096, 0.50616, 0.06176, 0.04489, 0.07732, 0.03151, 0.01188, 0.05935),
    ("basis_grid_grpo_g1_basis", "basis_grid_grpo_g1_basis", 2, 0.46437, 0.44145, 0.48668, 0.04202, 0.02670,
     0.05736, -0.00354, -0.02916, 0.02216),
    ("v05_osla", "v05_osla", 3, 0.45552, 0.43306, 0.47684, 0.03317, 0.01648, 0.04810, -0.00131, -0.02612, 0.02366),
    ("negative_only_g1", "negative_only_g1", 4, 0.45001, 0.42001, 0.47999, 0.02777, 0.01111, 0.04444, -0.04321,
     -0.06543, -0.02109),
    ("grpo_g16", "grpo_g16", 5, 0.44855, 0.42590, 0.47031, 0.02620, 0.00983, 0.04175, -0.01024, -0.03512, 0.01555),
]
SEPARATED = {("vanilla_g1", "v05_osla"), ("vanilla_g1", "negative_only_g1"), ("vanilla_g1", "grpo_g16"),
             ("basis_grid_grpo_g1_basis", "grpo_g16"), ("positive_only_g1", "grpo_g16")}


def _ranking(rows=RANKING) -> pd.DataFrame:
    cols = ["method", "run", "rank", "accuracy", "ci_lo", "ci_hi", "gain", "gain_ci_lo", "gain_ci_hi", "pass_gain",
            "pass_gain_ci_lo", "pass_gain_ci_hi"]
    df = pd.DataFrame(rows, columns=cols)
    df["tie_group"] = ["a", "a", "ab", "b", "bc", "c"][:len(df)]
    df["pass_metric"], df["same_as"] = "pass@16", ""
    return df


def _pairs(ranking: pd.DataFrame, separated=SEPARATED) -> pd.DataFrame:
    acc = dict(zip(ranking["method"], ranking["accuracy"]))
    names = list(ranking["method"])
    rows = [dict(a=a, b=b, diff=acc[a] - acc[b], ci_lo=acc[a] - acc[b] - 0.01, ci_hi=acc[a] - acc[b] + 0.01,
                 separated=(a, b) in separated) for i, a in enumerate(names) for b in names[i + 1:]]
    return pd.DataFrame(rows)


def _iqm(ranking: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"rank": ranking["rank"], "method": ranking["method"], "metric": "accuracy",
                         "iqm": ranking["accuracy"] - 0.02345, "ci_lo": np.nan, "ci_hi": np.nan})


def _summary(ranking: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"method": ranking["method"], "seeds": 1, "start_eval_greedy": 0.58820,
                         "eval_greedy_final": 0.58820 + ranking["gain"] / 2, "eval_greedy_gain": ranking["gain"] / 2,
                         "eval_greedy_gain_ci_lo": np.nan, "eval_greedy_gain_ci_hi": np.nan})


def _write(tmp_path: Path, claims: pd.DataFrame, ranking: pd.DataFrame | None = None, **tables) -> R.Inputs:
    claims.to_csv(tmp_path / "CLAIMS.csv", index=False)
    if ranking is None:
        return R.Inputs(tmp_path / "CLAIMS.csv")
    parts = {"ranking": ranking, "pairs": tables.get("pairs", _pairs(ranking)), "iqm": _iqm(ranking),
             "summary": _summary(ranking)}
    for name, df in parts.items():
        write_table(df, tmp_path / f"{name}.parquet")
    return R.Inputs(tmp_path / "CLAIMS.csv", *(tmp_path / f"{n}.parquet" for n in ("ranking", "pairs", "iqm", "summary")))


def _doc(inputs: R.Inputs, scale="tiny") -> str:
    return R.to_markdown(R.read_tables(inputs), scale=scale, config_name="tiny.yaml", config_hash="abc",
                         tables=R.provenance(inputs))


def _section(doc: str, title: str) -> str:
    return doc.split(f"## {title}")[1].split("\n## ")[0]


def _basis(doc: str) -> str:
    return doc.split("### BASIS (004)")[1].split("\n### ")[0]


def test_a_claims_status_decides_its_sentence(tmp_path):
    """A bug that grouped or counted claims by another column than `status` fails here."""
    held = _basis(_doc(_write(tmp_path, _claims("reproduced"), _ranking())))
    assert "Hold (reproduced) (1):\n- `basis.rl_vs_grpo8`" in held
    assert "1 of 2 claims of BASIS hold here; 0 contradicted." in held
    turned = _basis(_doc(_write(tmp_path, _claims("contradicted"), _ranking())))
    assert "Contradicted (1):\n- `basis.rl_vs_grpo8`" in turned and "Hold (reproduced)" not in turned
    assert "0 of 2 claims of BASIS hold here; 1 contradicted." in turned
    # a status the reading does not know is an error naming it, not a silently dropped row
    with pytest.raises(R.ReadingError, match="'holds'"):
        _doc(_write(tmp_path, _claims("holds"), _ranking()))


def _cells(*frames: pd.DataFrame) -> set[str]:
    """Every number of the tables as the page may print it: 3 decimals (signed or not), 1 decimal
    for a %, and the numbers inside text cells (a premise's own interval)."""
    out = set()
    for df in frames:
        for v in df.to_numpy().ravel():
            if isinstance(v, str):
                out |= {m.lstrip("+-") for m in re.findall(r"[+-]?\d+\.\d+", v)}
            elif isinstance(v, (float, int, np.floating, np.integer)) and not isinstance(v, bool) and np.isfinite(v):
                out |= {f"{abs(float(v)):.3f}", f"{abs(float(v)):.1f}"}
    return out


def test_every_number_on_the_page_is_a_cell_of_its_tables(tmp_path):
    """A typed number, or one read from the wrong column (the pass@k gain's interval from the
    accuracy's), is a decimal the tables do not hold: it fails here."""
    claims, ranking = _claims(), _ranking()
    inputs = _write(tmp_path, claims, ranking)
    doc = _doc(inputs)
    cells = _cells(claims, ranking, _pairs(ranking), _iqm(ranking), _summary(ranking))
    printed = [m.lstrip("+-") for m in re.findall(r"[+-]?\d+\.\d+", doc)]
    assert printed and not [p for p in printed if p not in cells], [p for p in printed if p not in cells]
    # each claim's measured value with its interval, each method's rank among the ranked
    assert "`basis.rl_vs_grpo8`: accuracy(BASIS) - accuracy(GRPO G=8) > -0.009; measured 0.047 [0.012, 0.083]" in doc
    assert "`v0.budget_allocation`: " in doc and "(rl.methods of this config lacks grpo_budget_v0)" in doc
    assert ("`v05_osla`: rank 3 of 5; accuracy 0.456 [0.433, 0.477]; gain over the start +0.033 [+0.016, +0.048], "
            "pass@16 gain -0.001 [-0.026, +0.024]") in doc


def test_the_ranking_places_each_papers_methods_by_the_pairs(tmp_path):
    """Separated above or below follows the pair's sign and flag; a sign flipped in `_separation`
    (or `separated` ignored) reads the wrong way round here."""
    claims, ranking = _claims(), _ranking()
    part = _section(_doc(_write(tmp_path, claims, ranking)), "The ranking against each paper")
    v05 = part.split("### V0.5")[1].split("###")[0]
    # the other runs: vanilla_g1 (positive_only_g1 is its run), BASIS, negative_only_g1, grpo_g16
    assert "Against the 4 runs outside V0.5: separated above 0, below 1, not separated from 3 (below: `vanilla_g1`)." in v05
    basis = part.split("### BASIS")[1].split("###")[0]
    assert "separated above 1, below 0, not separated from 3." in basis
    assert "none of V0's methods" in part and "none of Le Critique's methods" in part
    # the pair read the other way: v05_osla now separated above grpo_g16
    flipped = _section(_doc(_write(tmp_path, claims, ranking, pairs=_pairs(ranking, SEPARATED | {("v05_osla", "grpo_g16")}))),
                       "The ranking against each paper")
    assert "separated above 1, below 1, not separated from 2 (below: `vanilla_g1`)." in flipped.split("### V0.5")[1]


def test_the_arms_read_learning_or_sharpening_from_their_intervals(tmp_path):
    claims, ranking = _claims(), _ranking()
    arms = _section(_doc(_write(tmp_path, claims, ranking)), "The diagnostic arms: learning or sharpening")
    pos = next(line for line in arms.splitlines() if "`positive_only_g1`" in line)
    neg = next(line for line in arms.splitlines() if "`negative_only_g1`" in line)
    assert "pass@16 gain +0.032 [+0.012, +0.059] (rises)" in pos and pos.endswith("(learning).")
    assert "mean@k gain +0.028 [+0.011, +0.044] (rises)" in neg and "(falls)" in neg
    assert neg.endswith("mean@k rises while pass@16 falls: sharpening.")
    assert "greedy 0.588 -> 0.602, gain +0.014 (no interval)" in neg
    # a scale without them says so
    small = ranking[~ranking["method"].isin(["positive_only_g1", "negative_only_g1"])]
    none = _section(_doc(_write(tmp_path, claims, small)), "The diagnostic arms: learning or sharpening")
    assert "has neither `positive_only_g1` nor `negative_only_g1`" in none


@pytest.mark.parametrize("lo,hi,side", [(0.01, 0.02, "above"), (-0.02, -0.01, "below"), (-0.01, 0.01, "contains"),
                                        (np.nan, np.nan, "none"), (0.0, 0.01, "contains")])
def test_side_of_zero(lo, hi, side):
    assert R.side(lo, hi) == side


def test_premises_say_which_claims_the_world_cannot_judge(tmp_path):
    doc = _doc(_write(tmp_path, _claims(), _ranking()))
    part = _section(doc, "The premises of this world")
    assert "**absent** (claims it leaves unjudged: `basis.rl_vs_vanilla`): vanilla GRPO G=1 collapses" in part
    assert "**present** (claims it lets us judge: `basis.rl_vs_grpo8`)" in part
    assert "Claims this world cannot judge (premise absent): `basis.rl_vs_vanilla`." in part


def test_the_header_names_scale_config_commits_and_never_paper_numbers(tmp_path):
    from sparserl.core.artifacts import write_manifest
    inputs = _write(tmp_path, _claims(), _ranking())
    write_manifest(inputs.claims, rows=4, columns=None, extra={"git_commit": "feedc0de", "config_hash": "abc"})
    doc = R.to_markdown(R.read_tables(inputs), scale="small", config_name="small.yaml", config_hash="abc",
                        tables=R.provenance(inputs), origin="from published tables at commit 9678e3b")
    assert "# Results at scale `small`" in doc and "Config `small.yaml` (hash `abc`)" in doc
    assert "commit `feedc0de`, config `abc`" in doc
    assert "Measured from published tables at commit 9678e3b." in doc
    assert "**SMALL SCALE: not paper numbers.**" in doc and "never stands for a paper's number" in doc
    # the ranking's manifest-less synthetic tables are named as of an unknown commit and config
    assert "Tables made under another config than this one: `unknown`." in doc


def test_a_config_without_rl_says_there_is_no_ranking(tmp_path):
    doc = _doc(_write(tmp_path, _claims()))
    assert "no head-to-head ranking" in doc and "has neither `positive_only_g1`" in doc


@pytest.mark.parametrize("table", ["claims", "pairs", "summary"])
def test_a_missing_table_is_one_line_naming_it(tmp_path, table):
    inputs = _write(tmp_path, _claims(), _ranking())
    path = getattr(inputs, table)
    path.unlink()
    with pytest.raises(R.ReadingError) as e:
        R.read_tables(inputs)
    assert str(path) in str(e.value) and "\n" not in str(e.value) and "missing" in str(e.value)


def test_a_table_without_a_column_names_file_and_column(tmp_path):
    ranking = _ranking().drop(columns="pass_gain_ci_lo")
    with pytest.raises(R.ReadingError, match=r"ranking\.parquet: column 'pass_gain_ci_lo' is missing"):
        R.read_tables(_write(tmp_path, _claims(), ranking))


def _cli(*argv) -> int:
    from sparserl.cli import main
    return main(list(argv))


def test_cli_writes_the_page_with_its_manifest_and_copies_it(repo, tmp_path, monkeypatch, capsys):
    from sparserl.core.artifacts import read_manifest
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    monkeypatch.chdir(tmp_path)
    cfg_file = str(repo / "configs/tiny.yaml")
    P = Paths(load_config([cfg_file]))
    # nothing built yet: the first table is named in one line, no traceback
    with pytest.raises(SystemExit) as e:
        _cli("reading", "--config", cfg_file)
    assert str(P.claims_csv()) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SystemExit) as e:
        _cli("reading", "--config", cfg_file, "--copy-to", "docs/results_tiny.md")
    assert str(P.results_md()) in str(e.value) and "published rebuild tiny" in str(e.value)
    ranking = _ranking()
    P.claims_csv().parent.mkdir(parents=True)
    _claims().to_csv(P.claims_csv(), index=False)
    for name, df in (("ranking", ranking), ("pairs", _pairs(ranking)), ("iqm", _iqm(ranking))):
        write_table(df, P.head_to_head(name))
    write_table(_summary(ranking), P.rl_summary())
    assert _cli("reading", "--config", cfg_file, "--config-name", "tiny.yaml") == 0
    page = P.results_md()
    text = page.read_text()
    assert text.startswith("# Results at scale `tiny`") and "Config `tiny.yaml`" in text
    assert oct(page.stat().st_mode & 0o777) == "0o644"
    assert read_manifest(page)["tables"] == [str(p) for p in R.Inputs.of(P).paths()]
    (tmp_path / "docs").mkdir()
    assert _cli("reading", "--config", cfg_file, "--copy-to", "docs/results_tiny.md") == 0
    assert (tmp_path / "docs/results_tiny.md").read_text() == text


def test_cli_reads_the_tables_the_rule_names(repo, tmp_path, monkeypatch):
    """Rule reading passes its named inputs (--claims, --ranking, ...): the page reads those files,
    not the config's tree (nothing is built there); on main the flags did not exist."""
    from sparserl.core.artifacts import read_manifest
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    inputs = _write(tmp_path / "elsewhere", _claims(), _ranking())
    flags = [x for k, p in inputs.named().items() for x in (f"--{k}", str(p))]
    out = tmp_path / "page.md"
    assert _cli("reading", "--config", str(repo / "configs/tiny.yaml"), *flags, "--out-md", str(out)) == 0
    assert read_manifest(out)["tables"] == [str(p) for p in inputs.paths()]
    assert set(inputs.named()) == set(R.FIELDS)  # every table has its flag


@pytest.mark.e2e  # DAG dry run
def test_reading_is_a_rebuild_rule_and_all_plans_it(repo, tmp_path):
    """`published` rebuilds the page from published tables: the tiny DAG's `all` plans rule reading
    on the claims CSV and the head-to-head, and the rebuild plan runs it without publishing what
    the claims and head-to-head jobs make (dropping it from REBUILD_RULES fails here)."""
    from sparserl.cli.published import parse_jobs, plan
    out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(tmp_path),
                          "-n", "--forceall", "all"], cwd=repo, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = parse_jobs(out.stdout + "\n" + out.stderr)
    job = next(j for j in jobs if j.rule == "reading")
    assert job.outputs == ["paper_figures/tiny/RESULTS.md"]
    assert {"paper_figures/tiny/CLAIMS.csv", "results/tiny/head_to_head/ranking.parquet",
            "results/tiny/head_to_head/pairs.parquet", "results/tiny/rl/summary.parquet"} <= set(job.inputs)
    p = plan((jobs, set()))
    assert "reading" in {j.rule for j in p.rebuild}
    assert not set(job.inputs) & set(p.needed)  # each made by a rebuild job, none published
