"""The reading of a scale's results: `paper_figures/<scale>/RESULTS.md` (rule `reading`,
`sparserl reading`), the page `docs/results_<scale>.md` copies. It types no number and no verdict:
every number is a cell of the tables it reads, every sentence follows a status or an interval's
side of zero, by the rules below.

Tables (each a DAG output with its manifest, whose commit and config hash the page repeats):
- `paper_figures/<scale>/CLAIMS.csv` (`sparserl.studies.claims`): per paper, the claims grouped by
  `status` (reproduced and direction only hold; contradicted; inconclusive, untestable, premise
  absent, not run), each with its measured value and 95% interval; and the `premise` column: the
  mechanisms this world has (present), lacks (absent: the claims resting on it cannot be judged)
  or leaves open (unclear).
- with an `rl` section, the head-to-head (`sparserl.studies.head_to_head`): `ranking.parquet` places
  each paper's methods (`PROPOSED`) among the other methods (rank, accuracy and its interval, gain
  over the start policy); `pairs.parquet` counts the others each is separated from, above and below
  (its rule 3); `iqm.parquet` (rliable, `sparserl.studies.aggregates`) its IQM rank. The diagnostic
  arms (`ARMS`: A = r and A = r - 1, configs/methods/positive_only_g1.yaml, negative_only_g1.yaml)
  read their mean@k and pass@k gains from the ranking (hierarchical bootstrap intervals) and the
  greedy gain from `rl/summary.parquet` (t interval over seeds; none with one seed).

Sharpening or learning follows the reading of `head_to_head/sharpening_curves` (docs/world.md,
"Reading the RL table"): sharpening raises mean@k while pass@k falls; learning solves problems the
start policy did not, so pass@k rises. A gain "rises" or "falls" when its 95% interval lies above or
below 0; otherwise it "does not move beyond noise".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.artifacts import read_manifest, read_table
from sparserl.core.paths import Paths

# statuses of CLAIMS.csv (sparserl.studies.claims.STATUSES) in the order the page reads them, with
# the heading each group gets
GROUPS = (("reproduced", "Hold (reproduced)"), ("direction only", "Hold in direction only"),
          ("contradicted", "Contradicted"), ("inconclusive", "Inconclusive"),
          ("untestable (single run)", "Untestable (single run)"), ("premise absent", "Premise absent: not judged"),
          ("not run at this scale", "Not run at this scale"))
CLAIMS_NEED = ("id", "paper", "quantity", "relation", "threshold", "measured", "ci_lo", "ci_hi", "premise",
               "premise_status", "status", "reason")
RANKING_NEED = ("rank", "method", "run", "accuracy", "ci_lo", "ci_hi", "tie_group", "gain", "gain_ci_lo",
                "gain_ci_hi", "pass_gain", "pass_gain_ci_lo", "pass_gain_ci_hi", "pass_metric", "same_as")
PAIRS_NEED = ("a", "b", "diff", "ci_lo", "ci_hi", "separated")
IQM_NEED = ("rank", "method", "metric", "iqm", "ci_lo", "ci_hi")
SUMMARY_NEED = ("method", "seeds", "start_eval_greedy", "eval_greedy_final", "eval_greedy_gain",
                "eval_greedy_gain_ci_lo", "eval_greedy_gain_ci_hi")
# the diagnostic arms that tell learning from sharpening (configs/small.yaml's rl.methods): advantage A = r and A = r - 1
ARMS = (("positive_only_g1", "positive-only (A = r)"), ("negative_only_g1", "negative-only (A = r - 1)"))


def _v0(spec) -> bool:
    # V0 (paper 001), Figure 5 (left): V0's predicted pass rates allocate the rollouts
    return spec.sampler == "budget" and spec.prior is not None and spec.prior.kind == "v0"


def _v05(spec) -> bool:
    # V0.5 (paper 000): the prior fused with the group's empirical mean, fixed k or OSLA
    return spec.estimator == "v05_fusion"


def _basis(spec) -> bool:
    # BASIS (paper 004): the refined baseline from the offline cache, at any loss
    return spec.estimator.startswith("basis")


def _le_critique(spec) -> bool:
    # Le Critique (paper 002): privileged critics (Pvf) and Tether
    return spec.estimator == "tether" or (spec.critic is not None and spec.critic.privileged != "none")


# each paper's own methods, told apart by their spec (configs/methods/<name>.yaml), with what the
# page says when the ranking has none of them
PROPOSED = {"V0": (_v0, "V0-guided rollout allocation (sampler budget, V0 prior)"),
            "V0.5": (_v05, "V0.5's fused baseline (estimator v05_fusion)"),
            "BASIS": (_basis, "BASIS baselines (estimator basis_*)"),
            "Le Critique": (_le_critique, "privileged critics (Pvf) or Tether")}


class ReadingError(ValueError):
    """A table the reading needs is missing or lacks a column (the message names the file and fix)."""


@dataclass
class Inputs:
    """The tables' paths; the head-to-head's are None for a config without an `rl` section."""
    claims: Path
    ranking: Path | None = None
    pairs: Path | None = None
    iqm: Path | None = None
    summary: Path | None = None

    @classmethod
    def of(cls, P: Paths) -> Inputs:
        """The tables of tree `P` (a `Paths`)."""
        if not P.cfg.get("rl"):
            return cls(P.claims_csv())
        return cls(P.claims_csv(), P.head_to_head("ranking"), P.head_to_head("pairs"), P.head_to_head("iqm"),
                   P.rl_summary())

    def paths(self) -> list[Path]:
        return list(self.named().values())

    def named(self) -> dict[str, Path]:
        """Field -> path of the tables there are (the rule's named inputs, `sparserl reading --<field>`)."""
        return {k: p for k in FIELDS if (p := getattr(self, k)) is not None}


FIELDS = ("claims", "ranking", "pairs", "iqm", "summary")  # Inputs' tables, in the page's provenance order


def _read(path: Path, need: tuple[str, ...]) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise ReadingError(f"{path}: missing; make it first (`snakemake --cores 2 {path}`)")
    df = pd.read_csv(path) if path.suffix == ".csv" else read_table(path)
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ReadingError(f"{path}: column {missing[0]!r} is missing; it predates the reading: rebuild it "
                           f"(`snakemake --cores 2 --forcerun {path}`)")
    return df


def read_tables(inputs: Inputs) -> dict:
    """Every table, checked; raises ReadingError naming the first missing file or column."""
    t = {"claims": _read(inputs.claims, CLAIMS_NEED)}
    for key, need in (("ranking", RANKING_NEED), ("pairs", PAIRS_NEED), ("iqm", IQM_NEED),
                      ("summary", SUMMARY_NEED)):
        path = getattr(inputs, key)
        t[key] = None if path is None else _read(path, need)
    return t


# --------------------------------------------------------------------------------------- numbers

def _finite(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and np.isfinite(float(x))


def _num(x, fmt: str = "{:.3f}") -> str:
    return fmt.format(float(x)) if _finite(x) else "n/a"


def _interval(value, lo, hi, fmt: str = "{:+.3f}") -> str:
    if not _finite(value):
        return "n/a"
    if _finite(lo) and _finite(hi):
        return f"{fmt.format(float(value))} [{fmt.format(float(lo))}, {fmt.format(float(hi))}]"
    return f"{fmt.format(float(value))} (no interval)"


def side(lo, hi) -> str:
    """Where a 95% interval lies against 0: above, below, contains, or none (no interval)."""
    if not (_finite(lo) and _finite(hi)):
        return "none"
    return "above" if lo > 0 else "below" if hi < 0 else "contains"


def moves(lo, hi) -> str:
    return {"above": "rises", "below": "falls", "contains": "does not move beyond noise",
            "none": "has no interval"}[side(lo, hi)]


def _claim_formats() -> dict[str, str]:
    """Each claim's number format (CLAIMS.md's): a % of MSE reads as -72.0%, an accuracy as 0.012."""
    from sparserl.studies.claims import CLAIMS
    return {c.id: c.fmt for c in CLAIMS}


# --------------------------------------------------------------------------------------- sections

def claim_line(r, fmt: str) -> str:
    head = f"`{r.id}`: {r.quantity} {r.relation} {_num(r.threshold, fmt)}"
    if r.status == "not run at this scale":
        return head + (f" ({r.reason})" if isinstance(r.reason, str) and r.reason else "")
    return head + f"; measured {_interval(r.measured, r.ci_lo, r.ci_hi, fmt)}"


def claims_section(claims: pd.DataFrame) -> list[str]:
    from sparserl.studies.claims import PAPERS
    fmts = _claim_formats()
    known = {s for s, _ in GROUPS}
    odd = sorted(set(claims["status"]) - known)
    if odd:
        raise ReadingError(f"CLAIMS.csv: status {odd[0]!r} is not one of {', '.join(sorted(known))}; "
                           "rebuild it with this code (`snakemake --cores 2 --forcerun claims`)")
    counts = claims["status"].value_counts()
    out = ["## The claims, per paper", "",
           f"{len(claims)} claims: " + ", ".join(f"{s} {int(counts.get(s, 0))}" for s, _ in GROUPS) + ".", ""]
    for paper, rows in claims.groupby("paper", sort=False):
        out += [f"### {PAPERS.get(paper, paper)}", ""]
        for status, title in GROUPS:
            sel = rows[rows["status"] == status]
            if sel.empty:
                continue
            out.append(f"{title} ({len(sel)}):")
            out += [f"- {claim_line(r, fmts.get(r.id, '{:.3f}'))}" for r in sel.itertuples()]
            out.append("")
        held = int(rows["status"].isin(["reproduced", "direction only"]).sum())
        out += [f"{held} of {len(rows)} claims of {paper} hold here; "
                f"{int((rows['status'] == 'contradicted').sum())} contradicted.", ""]
    return out


def premises_section(claims: pd.DataFrame) -> list[str]:
    rows = claims[claims["premise"].notna() & (claims["premise"].astype(str) != "")]
    out = ["## The premises of this world", "",
           "The mechanism each claim rests on, measured here (CLAIMS.csv's premise column): present, absent "
           "(the data cannot judge the claim) or unclear.", ""]
    if rows.empty:
        return out + ["No claim of this table rests on a measured premise.", ""]
    say = {"present": "claims it lets us judge", "absent": "claims it leaves unjudged",
           "unclear": "claims read with it unsettled"}
    for status in ("present", "absent", "unclear"):
        sel = rows[rows["premise_status"] == status]
        for premise, g in sel.groupby("premise", sort=False):
            out.append(f"- **{status}** ({say[status]}: {', '.join(f'`{i}`' for i in g['id'])}): {premise}")
    absent = rows[rows["premise_status"] == "absent"]
    out += ["", "Claims this world cannot judge (premise absent): "
            + (", ".join(f"`{i}`" for i in absent["id"]) if len(absent) else "none") + ".", ""]
    return out


def _distinct(ranking: pd.DataFrame) -> pd.DataFrame:
    """One row per run: an alias (`run` shared) or an EVPO twin (`same_as`) counts once."""
    r = ranking[ranking["same_as"].fillna("").astype(str) == ""]
    return r.drop_duplicates("run")


def _paper_methods(ranking: pd.DataFrame) -> dict[str, list[str]]:
    from sparserl.methods.spec import load_method
    specs = {m: load_method(m) for m in ranking["method"]}
    return {paper: [m for m in ranking["method"] if test(specs[m])] for paper, (test, _) in PROPOSED.items()}


def _separation(pairs: pd.DataFrame, method: str, others: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Others separated below `method` (it is above them), above it, and not separated."""
    below, above, tied = [], [], []
    for o in others:
        ab = pairs[(pairs["a"] == method) & (pairs["b"] == o)]
        ba = pairs[(pairs["a"] == o) & (pairs["b"] == method)]
        if len(ab):
            row, sign = ab.iloc[0], 1.0
        elif len(ba):
            row, sign = ba.iloc[0], -1.0
        else:
            raise ReadingError(f"pairs.parquet: no row for the pair {method} / {o}; rebuild the head-to-head "
                               "(`snakemake --cores 2 --forcerun head_to_head`)")
        if bool(row["separated"]):
            (below if sign * float(row["diff"]) > 0 else above).append(o)
        else:
            tied.append(o)
    return below, above, tied


def ranking_section(t: dict) -> list[str]:
    out = ["## The ranking against each paper", ""]
    ranking, pairs, iqm = t["ranking"], t["pairs"], t["iqm"]
    if ranking is None:
        return out + ["This config has no `rl` section: no head-to-head ranking.", ""]
    runs = _distinct(ranking)
    n_ranks = int(ranking["rank"].max())
    metric = str(ranking["pass_metric"].iloc[0]) if len(ranking) else "pass@k"
    out += [f"{len(ranking)} methods ({len(runs)} distinct runs) ranked by final accuracy (mean@k over the "
            f"benchmarks), ranks 1 to {n_ranks}; intervals 95%. \"Separated\" is the head-to-head's rule 3 "
            "(pairs.parquet), with no correction for the number of pairs.", ""]
    first = ranking[ranking["rank"] == 1]
    if len(first):
        r = first.iloc[0]
        out += [f"Rank 1: {', '.join(f'`{m}`' for m in first['method'])}, accuracy "
                f"{_interval(r['accuracy'], r['ci_lo'], r['ci_hi'], '{:.3f}')}, gain over the start "
                f"{_interval(r['gain'], r['gain_ci_lo'], r['gain_ci_hi'])}.", ""]
    acc_iqm = iqm[iqm["metric"] == "accuracy"].set_index("method") if iqm is not None else None
    by_method = ranking.set_index("method")
    for paper, methods in _paper_methods(ranking).items():
        out += [f"### {paper}", ""]
        if not methods:
            out += [f"The ranking has none of {paper}'s methods ({PROPOSED[paper][1]}): rl.methods lacks them.", ""]
            continue
        mine_runs = set(by_method.loc[methods, "run"])
        others = [m for m in runs["method"] if m not in methods and by_method.loc[m, "run"] not in mine_runs]
        for m in methods:
            r = by_method.loc[m]
            below, above, tied = _separation(pairs, m, others)
            line = (f"- `{m}`: rank {int(r['rank'])} of {n_ranks}; accuracy "
                    f"{_interval(r['accuracy'], r['ci_lo'], r['ci_hi'], '{:.3f}')}; gain over the start "
                    f"{_interval(r['gain'], r['gain_ci_lo'], r['gain_ci_hi'])}, {metric} gain "
                    f"{_interval(r['pass_gain'], r['pass_gain_ci_lo'], r['pass_gain_ci_hi'])}; tie group "
                    f"`{r['tie_group']}`")
            if acc_iqm is not None and m in acc_iqm.index:
                q = acc_iqm.loc[m]
                line += (f"; IQM rank {int(q['rank'])} of {int(acc_iqm['rank'].max())}, IQM "
                         f"{_interval(q['iqm'], q['ci_lo'], q['ci_hi'], '{:.3f}')}")
            line += (f". Against the {len(others)} runs outside {paper}: separated above {len(below)}, below "
                     f"{len(above)}, not separated from {len(tied)}")
            line += f" (below: {', '.join(f'`{o}`' for o in above)})." if above else "."
            out.append(line)
        out.append("")
    return out


def arms_section(t: dict) -> list[str]:
    out = ["## The diagnostic arms: learning or sharpening", ""]
    ranking, summary = t["ranking"], t["summary"]
    names = [m for m, _ in ARMS]
    if ranking is None or not set(names) & set(ranking["method"]):
        return out + [f"This scale's rl.methods has neither {' nor '.join(f'`{m}`' for m in names)} "
                      "(configs/small.yaml runs them): no diagnostic arms to read.", ""]
    by = ranking.set_index("method")
    summ = summary.set_index("method") if summary is not None else None
    metric = str(ranking["pass_metric"].iloc[0])
    out += ["Gains of the final checkpoint over the start policy. Sharpening raises mean@k while "
            f"{metric} falls; learning solves problems the start policy did not, so {metric} rises "
            "(docs/world.md, \"Reading the RL table\").", ""]
    for m, label in ARMS:
        if m not in by.index:
            out.append(f"- {label}, `{m}`: not in this scale's rl.methods.")
            continue
        r = by.loc[m]
        line = (f"- {label}, `{m}`: mean@k gain {_interval(r['gain'], r['gain_ci_lo'], r['gain_ci_hi'])} "
                f"({moves(r['gain_ci_lo'], r['gain_ci_hi'])}); {metric} gain "
                f"{_interval(r['pass_gain'], r['pass_gain_ci_lo'], r['pass_gain_ci_hi'])} "
                f"({moves(r['pass_gain_ci_lo'], r['pass_gain_ci_hi'])})")
        if summ is not None and m in summ.index:
            s = summ.loc[m]
            line += (f"; greedy {_num(s['start_eval_greedy'])} -> {_num(s['eval_greedy_final'])}, gain "
                     f"{_interval(s['eval_greedy_gain'], s['eval_greedy_gain_ci_lo'], s['eval_greedy_gain_ci_hi'])}")
        verdict = reading(r["gain_ci_lo"], r["gain_ci_hi"], r["pass_gain_ci_lo"], r["pass_gain_ci_hi"], metric)
        out.append(f"{line}. {verdict}")
    out.append("")
    return out


def reading(gain_lo, gain_hi, pass_lo, pass_hi, metric: str = "pass@k") -> str:
    """The arm's sentence, from the sides of its mean@k and pass@k gain intervals."""
    g, p = side(gain_lo, gain_hi), side(pass_lo, pass_hi)
    if p == "above":
        return f"{metric} rises: the arm solves problems the start policy did not (learning)."
    if g == "above" and p == "below":
        return f"mean@k rises while {metric} falls: sharpening."
    if p == "none" or g == "none":
        return "Without intervals the table cannot tell learning from sharpening."
    if g == "above":
        return f"mean@k rises, {metric} does not move beyond noise: no sign of learning by {metric}."
    return f"mean@k {moves(gain_lo, gain_hi)}, {metric} {moves(pass_lo, pass_hi)}."


def provenance(inputs: Inputs, workdir: Path = Path(".")) -> list[tuple[str, str, str]]:
    """(path, commit, config hash) of each table, from its manifest."""
    rows = []
    for p in inputs.paths():
        m = read_manifest(workdir / p) or {}
        rows.append((str(p), str(m.get("git_commit") or "unknown"), str(m.get("config_hash") or "unknown")))
    return rows


def to_markdown(t: dict, *, scale: str, config_name: str, config_hash: str, tables: list[tuple[str, str, str]],
                origin: str = "") -> str:
    lines = [f"# Results at scale `{scale}`: what the claims and the ranking say", "",
             f"Config `{config_name}` (hash `{config_hash}`). Generated by `sparserl reading` (rule `reading`, "
             "`sparserl.studies.reading`) from the tables below; every number on this page is a cell of them "
             "and every verdict a status or an interval's side of zero.", ""]
    commits = sorted({c for _, c, _ in tables})
    lines += [f"- `{p}`: commit `{c}`, config `{h}`" for p, c, h in tables]
    lines += ["", f"Commits of the tables: {', '.join(f'`{c}`' for c in commits)}."]
    hashes = sorted({h for _, _, h in tables} - {config_hash})
    if hashes:
        lines.append(f"Tables made under another config than this one: {', '.join(f'`{h}`' for h in hashes)}.")
    if origin:
        lines.append(f"Measured {origin}.")
    lines.append("")
    if scale != "paper":
        lines += [f"**{scale.upper()} SCALE: not paper numbers.** Every number here comes from this scale's small "
                  "policies and tasks; a tiny or small number never stands for a paper's number.", ""]
    lines += claims_section(t["claims"]) + ranking_section(t) + arms_section(t) + premises_section(t["claims"])
    return "\n".join(lines).rstrip("\n") + "\n"


def write_reading(P: Paths, out: str | Path, *, config_name: str, inputs: Inputs | None = None) -> Path:
    """Read the tables (`inputs`, default `Inputs.of(P)`) of tree `P` (a `Paths`) and write the page
    atomically, with its manifest."""
    from sparserl.core.artifacts import atomic_write_text, config_hash, write_manifest
    from sparserl.core.published import origin_line
    cfg = P.cfg
    inputs = inputs or Inputs.of(P)
    t = read_tables(inputs)
    text = to_markdown(t, scale=cfg["scale"], config_name=config_name, config_hash=config_hash(cfg),
                       tables=provenance(inputs), origin=origin_line(P.results))
    atomic_write_text(out, text)
    write_manifest(out, rows=None, columns=None, cfg=cfg, extra={"tables": [str(p) for p in inputs.paths()]})
    return Path(out)
