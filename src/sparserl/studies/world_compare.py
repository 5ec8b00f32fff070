"""Worlds side by side: what RL gains over its start policy in each, from the RL
summaries alone, as a Markdown fragment. The DAG writes one world's, the run's own
(`Paths.world_compare`, rule world_compare); docs link there instead of typing numbers.

Each input is a results directory (`results/<scale>`) with `rl/summary.parquet`; its manifest
names the commit and config hash, which the fragment repeats. The fragment has:
- the start policy's held-out scores (mean@k, greedy, pass@k, greedy on slip templates) and its
  greedy-wrong share;
- per method, the gains of the final checkpoint over the start (mean over seeds, with the 95%
  t-interval over seeds when a world has 2 or more), the slip-template split among them;
- per world, the sentences a reader checks first: the slip-template split (selection-free, the
  learning-vs-sharpening reading; world 1 has none and says so), how many methods raise greedy
  accuracy, the rank correlation across methods of mean@k gains with greedy gains, the first
  method by mean@k gain, GRPO G=16's and vanilla's gains with the greedy-wrong split beside its
  complement (`evaluation.splits`), and EVPO's critic switch. Counts are over distinct runs: an
  alias, or an EVPO method whose switch was on at every step (`same_as`), counts once.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from sparserl.core.artifacts import read_table
from sparserl.evaluation.splits import NO_SLIP

GAINS = (("eval_gain", "mean@k"), ("eval_greedy_gain", "greedy"), ("eval_pass_gain", "pass@k"),
         ("eval_slip_greedy_gain", "slip-template greedy"), ("eval_other_greedy_gain", "other-template greedy"))
START = (("start_eval_accuracy", "mean@k"), ("start_eval_greedy", "greedy"), ("start_eval_pass", "pass@k"),
         ("start_eval_slip_greedy", "slip-template greedy"), ("start_eval_other_greedy", "other-template greedy"),
         ("greedy_wrong_share", "greedy-wrong share"))
SLIP = ("start_eval_slip_greedy", "start_eval_other_greedy", "eval_slip_greedy_gain", "eval_other_greedy_gain")
NEEDED = ("method", "seeds", "eval_gain")


def read_world(label: str, results: str | Path) -> dict:
    """One world's RL summary and its provenance; a clear error when the summary is missing."""
    path = Path(results) / "rl" / "summary.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: give a results/<scale> directory whose RL stage has run "
                                "(`snakemake rl` writes rl/summary.parquet)")
    df = read_table(path)
    missing = [c for c in NEEDED if c not in df]
    if missing:
        raise ValueError(f"{path}: column {missing[0]!r} is missing; it predates the gains over the start "
                         "policy: rerun `sparserl rl-summary` for it")
    man = path.with_name(path.name + ".manifest.json")
    meta = json.loads(man.read_text()) if man.exists() else {}
    return {"label": label, "summary": df.set_index("method"),
            "commit": str(meta.get("git_commit", "unknown"))[:7], "config_hash": meta.get("config_hash", "unknown"),
            "scale": meta.get("scale", "unknown")}


def _fmt(x: float) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:+.3f}"


def _cell(row: pd.Series, col: str) -> str:
    v = float(row.get(col, np.nan))
    lo, hi = float(row.get(f"{col}_ci_lo", np.nan)), float(row.get(f"{col}_ci_hi", np.nan))
    if not np.isfinite(v):
        return "none (world 1)" if col in SLIP and row.get("slip_split") == NO_SLIP else "n/a"
    return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) and np.isfinite(hi) else f"{v:+.3f}"


def independent(s: pd.DataFrame) -> pd.DataFrame:
    """The summary's rows that are runs of their own: not an alias of an earlier method (`run`) and
    not an EVPO method whose switch was on at every step (`same_as`, `engines.report.switch_note`)."""
    keep = pd.Series(True, index=s.index)
    if "run" in s:
        keep &= s["run"].astype(str) == s.index.astype(str)
    if "same_as" in s:
        keep &= s["same_as"].fillna("").astype(str) == ""
    return s[keep]


def _raised(gains: pd.Series, what: str, name: str) -> str:
    """How many methods raise a metric over the start policy, and the median gain."""
    g = gains.dropna()
    return (f"{int((g > 0).sum())} of {len(g)} methods raise {what}; "
            f"the median {name} gain is {_fmt(float(g.median()))}.")


def _slip_finding(s: pd.DataFrame) -> str:
    """The selection-free reading: greedy on slip templates, start and change, beside the others."""
    if "slip_split" not in s:
        return "Slip-template split: not in this summary (written before rl-summary recorded the split): rerun `sparserl rl-summary`."
    if (s["slip_split"] == NO_SLIP).all():
        return "Slip-template split: none; this world has no slip templates (world 1)."
    first = s.iloc[0]
    g = s["eval_slip_greedy_gain"].dropna()
    o = s["eval_other_greedy_gain"].dropna()
    return (f"Slip-template split ({first['slip_split']}; chosen by a hash, not by the start's answers): "
            f"greedy on slip templates starts at {float(first['start_eval_slip_greedy']):.3f}; "
            f"{int((g > 0).sum())} of {len(g)} methods raise it, by {_fmt(float(g.min()))} to "
            f"{_fmt(float(g.max()))} (median {_fmt(float(g.median()))}); on the other templates "
            f"(start {float(first['start_eval_other_greedy']):.3f}) {int((o > 0).sum())} of {len(o)} do "
            f"(median {_fmt(float(o.median()))}).")


def _flips(r: pd.Series) -> str:
    """The greedy-wrong split beside its complement, in problems (mean over seeds)."""
    if "greedy_wrong_to_right" not in r or not np.isfinite(float(r["greedy_wrong_to_right"])):
        return ""
    return (f"; greedy-wrong split: {float(r['greedy_wrong_to_right']):.1f} problems wrong -> right against "
            f"{float(r['greedy_right_to_wrong']):.1f} right -> wrong, net greedy {_cell(r, 'greedy_flip_net')} "
            f"(greedy on the split alone {_cell(r, 'eval_greedy_wrong_greedy_gain')})")


def findings(w: dict) -> list[str]:
    """The sentences a reader checks first, from one world's summary."""
    full = w["summary"]
    s = independent(full)
    out = [_slip_finding(s)]
    if "eval_greedy_gain" in s:
        out.append(_raised(s["eval_greedy_gain"], "greedy accuracy over the start policy", "greedy"))
    if "eval_pass_gain" in s:
        out.append(_raised(s["eval_pass_gain"], "pass@k", "pass@k"))
    if "eval_greedy_gain" in s:
        both = s[["eval_gain", "eval_greedy_gain"]].dropna()
        if len(both) >= 3 and both.nunique().min() > 1:
            rho = stats.spearmanr(both["eval_gain"], both["eval_greedy_gain"]).statistic
            out.append(f"Across methods, the Spearman correlation of the mean@k gain with the greedy gain is "
                       f"{rho:+.2f}.")
    top = s["eval_gain"].idxmax()
    out.append(f"First by mean@k gain: {top} ({_fmt(float(s.loc[top, 'eval_gain']))}).")
    for m in ("grpo_g16", "vanilla_g1"):
        if m in full.index:
            r = full.loc[m]
            out.append(f"{m}: mean@k {_cell(r, 'eval_gain')}, greedy {_cell(r, 'eval_greedy_gain')}, "
                       f"pass@k {_cell(r, 'eval_pass_gain')}, slip-template greedy "
                       f"{_cell(r, 'eval_slip_greedy_gain')}, other-template greedy "
                       f"{_cell(r, 'eval_other_greedy_gain')}{_flips(r)} over {int(r['seeds'])} seed(s).")
    if "critic_switch" in full:
        for m, note in full["critic_switch"].fillna("").items():
            if note:
                out.append(f"{m} (EVPO's critic switch, Le Critique App. C): {note}"
                           + ("; counted once." if full.loc[m].get("same_as") else "."))
    return out


def _start_cell(first: pd.Series, col: str) -> str:
    v = float(first.get(col, np.nan))
    if np.isfinite(v):
        return f"{v:.3f}"
    return "none (world 1)" if col in SLIP and first.get("slip_split") == NO_SLIP else "n/a"


def compare(worlds: list[dict], command: str) -> str:
    """The Markdown fragment for the worlds, in the order given."""
    lines = [f"<!-- generated by `{command}`; do not edit by hand -->", "",
             "| world | scale | commit | config | seeds |", "|---|---|---|---|---|"]
    for w in worlds:
        seeds = int(w["summary"]["seeds"].max())
        lines.append(f"| {w['label']} | {w['scale']} | {w['commit']} | {w['config_hash']} | {seeds} |")
    lines += ["", "**Start policy, held-out benchmarks** (the RL start, `rl.policy`):", "",
              "| world | " + " | ".join(n for _, n in START) + " |", "|---" * (len(START) + 1) + "|"]
    for w in worlds:
        first = w["summary"].iloc[0]
        lines.append(f"| {w['label']} | " + " | ".join(_start_cell(first, c) for c, _ in START) + " |")
    methods = [m for m in worlds[0]["summary"].index if all(m in w["summary"].index for w in worlds[1:])]
    lines += ["", "**Gains of the final checkpoint over the start policy** (mean over seeds; "
              "[95% t-interval over seeds] where a world has 2 or more):", "",
              "| method | " + " | ".join(f"{w['label']}: {n}" for w in worlds for _, n in GAINS) + " |",
              "|---" * (1 + len(GAINS) * len(worlds)) + "|"]
    for m in methods:
        same = sorted({str(w["summary"].loc[m].get("same_as") or "") for w in worlds} - {""})
        name = f"{m} (= {', '.join(same)})" if same else m
        lines.append(f"| {name} | " + " | ".join(_cell(w["summary"].loc[m], c) for w in worlds for c, _ in GAINS)
                     + " |")
    for w in worlds:
        lines += ["", f"**{w['label']}:**", ""] + [f"- {s}" for s in findings(w)]
    return "\n".join(lines) + "\n"
