"""Tables as self-contained HTML pages, for the Snakemake report.

`snakemake --report` shows an HTML result inline and offers any other file (CSV, parquet) only as a
download, so the tables a reader should see beside the figures are written as HTML too: the claims
table (`sparserl claims`, `sparserl.studies.claims.to_html`) and the head-to-head ranking
(`sparserl ranking-html`, rule `head_to_head`). Every cell is escaped; a page holds no script and
loads nothing.
"""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd

STYLE = r"""
body { font-family: sans-serif; font-size: 13px; margin: 1em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; text-align: left; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.num { text-align: right; white-space: nowrap; }
.status-reproduced { background: #d9f2d9; }
.status-direction-only { background: #fff3c4; }
.status-contradicted { background: #f8d0d0; }
.status-premise-absent, .status-untestable-\(single-run\) { background: #e6e6e6; }
"""


def css_class(text: str) -> str:
    """`status-<text>` with spaces as dashes: the class of a status cell."""
    return "status-" + "-".join(str(text).split())


def html_page(title: str, intro: list[str], header: list[str], rows: list[list], *, legend: list[str] = ()) -> str:
    """One page: a title, paragraphs `intro`, a bulleted `legend`, then the table. A cell is its
    text, or (text, css class)."""
    esc = html.escape
    out = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8">', f"<title>{esc(title)}</title>",
           f"<style>{STYLE}</style></head><body>", f"<h1>{esc(title)}</h1>"]
    out += [f"<p>{esc(p)}</p>" for p in intro]
    if legend:
        out += ["<ul>"] + [f"<li>{esc(item)}</li>" for item in legend] + ["</ul>"]
    out += ["<table>", "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead>", "<tbody>"]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells for {len(header)} columns: {row!r}")
        cells = []
        for c in row:
            text, cls = c if isinstance(c, tuple) else (c, "")
            cells.append(f'<td class="{esc(cls)}">{esc(str(text))}</td>' if cls else f"<td>{esc(str(text))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out += ["</tbody></table>", "</body></html>", ""]
    return "\n".join(out)


def scale_note(scale: str) -> list[str]:
    """The warning every table below paper scale carries."""
    if scale == "paper":
        return []
    return [f"{scale.upper()} SCALE: not paper numbers. These come from this scale's small policies and tasks."]


RANKING_COLUMNS = ("rank", "tie_group", "method", "family", "seeds", "rollouts_total", "wall_time_s",
                   "accuracy", "ci_lo", "ci_hi", "ci_method", "ties_with")
# (header, column, format): read when the ranking has them (older rankings lack them)
OPTIONAL_HEADERS = (("protocol", ("protocol", "")), ("EVPO switch", ("critic_switch", "")),
                    ("greedy", ("greedy_accuracy", "{:.3f}")), ("pass@k", ("pass_at_k", "{:.3f}")),
                    # the selection-free slip-template split first, then the greedy-wrong one with
                    # its complement
                    ("slip split", ("slip_split", "")),
                    ("slip-template greedy start", ("slip_greedy_start", "{:.3f}")),
                    ("slip-template greedy change", ("slip_greedy_gain", "{:+.3f}")),
                    ("other-template greedy change", ("other_greedy_gain", "{:+.3f}")),
                    ("greedy wrong -> right", ("greedy_wrong_to_right", "{:.1f}")),
                    ("greedy right -> wrong", ("greedy_right_to_wrong", "{:.1f}")),
                    ("greedy net change", ("greedy_flip_net", "{:+.3f}")),
                    ("greedy-wrong mean@k", ("greedy_wrong_accuracy", "{:.3f}")),
                    ("greedy-wrong greedy", ("greedy_wrong_greedy", "{:.3f}")),
                    ("greedy-wrong share", ("greedy_wrong_share", "{:.3f}")),
                    ("lr", ("lr", "{:.2e}")), ("lr source", ("lr_source", "")), ("lr family", ("lr_family", "")))
OPTIONAL_COLUMNS = tuple(c for _, c in OPTIONAL_HEADERS)


def ranking_html(ranking: pd.DataFrame, *, scale: str, config_name: str, config_hash: str, commit: str,
                 source: str = "ranking.parquet") -> str:
    """The head-to-head ranking (`sparserl.studies.head_to_head`) as an HTML page."""
    lacking = [c for c in RANKING_COLUMNS if c not in ranking.columns]
    if lacking:
        raise ValueError(f"{source}: no column(s) {lacking} (it has {list(ranking.columns)}); it was written by "
                         f"older code: delete it and rebuild it with `snakemake --cores 2 {source}`")

    def num(x, fmt):
        return (fmt.format(x) if np.isfinite(x) else "—", "num")

    def opt(r, col, fmt):  # optional columns; "—" in a ranking without them
        v = getattr(r, col, np.nan)
        return num(float(v), fmt) if isinstance(v, (int, float, np.number)) else (str(v) or "—", "")

    rows = [[num(r.rank, "{:.0f}"), r.tie_group, r.method, r.family, num(r.seeds, "{:.0f}"),
             num(r.rollouts_total, "{:.0f}"), num(r.wall_time_s, "{:.0f}"), num(r.accuracy, "{:.3f}"),
             (f"[{r.ci_lo:.3f}, {r.ci_hi:.3f}]" if np.isfinite(r.ci_lo) and np.isfinite(r.ci_hi) else "—", "num"),
             r.ci_method, r.ties_with or "—",
             *(opt(r, c, f) for c, f in OPTIONAL_COLUMNS)] for r in ranking.itertuples()]
    intro = [f"Config {config_name} (hash {config_hash}), commit {commit}. Every RL method of the config, trained "
             f"from the same start policy at the same rollouts per step (the matched-prompts rows, protocol "
             f"column, at the same prompts per step), ranked by final held-out accuracy; "
             f"from {source} (`sparserl head-to-head`).", *scale_note(scale)]
    legend = ["rank: 1 + the number of methods with a strictly higher mean accuracy.",
              "accuracy: mean over the benchmarks of mean@k on the final checkpoint, mean over seeds; 95% CI as "
              "the CI method column says (t over seeds with >= 2 seeds, else a bootstrap over problems).",
              "tie group: methods sharing a letter are not separated by the data (their pairwise 95% interval "
              "contains 0; pairs.parquet holds each pair); ties with names them.",
              "rollouts total: rollouts generated over training; wall time: training steps only, seconds.",
              "EVPO switch: the share of steps its switch chose the critic (Le Critique App. C); "
              "'= <VF method>' when that was every step, so its run is that method's and it counts once in "
              "the ranks.",
              "greedy, pass@k: the final checkpoint's greedy accuracy and share of problems with a correct sample "
              "among k.",
              "slip-template greedy (world 2.0; the learning-vs-sharpening reading): greedy accuracy, pooled over "
              "problems, on the held-out problems of slip templates (chosen by a hash, not by the start "
              "policy's answers) at the start and its change to the final checkpoint, beside the change on the "
              "other templates; world 1 has no slip templates and says so.",
              "greedy-wrong: held-out problems the start policy's greedy answer gets wrong (share: their part of "
              "the held-out set), chosen by the start's own answers, so any change of the policy raises its "
              "scores: read wrong -> right beside right -> wrong (problems, mean over seeds) and the net change "
              "of greedy accuracy over all held-out problems.",
              "lr: the learning rate the runs trained at: rl.lr (fixed: untuned, a prior) or the one "
              "rl.lr_tuning's validation rule chose for their batch setting (tuned; tuning/lr.md)."]
    header = ["rank", "tie group", "method", "family", "seeds", "rollouts total", "wall time (s)", "accuracy",
              "95% CI", "CI method", "ties with", *(h for h, _ in OPTIONAL_HEADERS)]
    return html_page(f"Head-to-head ranking at scale {scale}", intro, header, rows, legend=legend)


def write_ranking_html(cfg: dict, src, out, *, config_name: str) -> Path:
    """Render the head-to-head's ranking.parquet `src` to `out` (atomically, with a manifest)."""
    from sparserl.core.artifacts import atomic_write_text, config_hash, git_commit, read_table, write_manifest
    src = Path(src)
    if not src.exists():
        raise FileNotFoundError(f"{src}: the head-to-head ranking is not built; run "
                                f"`snakemake --cores 2 {src}` (or `sparserl head-to-head`) with this config")
    ranking = read_table(src)
    text = ranking_html(ranking, scale=cfg["scale"], config_name=config_name, config_hash=config_hash(cfg),
                        commit=git_commit(), source=str(src))
    out = Path(out)
    atomic_write_text(out, text)
    write_manifest(out, rows=len(ranking), columns=None, cfg=cfg, extra={"source": str(src)})
    return out
