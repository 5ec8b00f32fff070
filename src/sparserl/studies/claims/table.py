"""The claims table: each claim measured and judged (`build_rows`), and its Markdown, CSV and HTML
(`write_claims`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sparserl.core.paths import Paths

from .catalog import CLAIMS
from .context import Context, MissingArtifact, NotRun
from .rule import (
    ABSENT,
    INCONCLUSIVE,
    MAGNITUDE_FACTOR,
    NI_FRACTION,
    NOT_RUN,
    PAPERS,
    POWER,
    PRESENT,
    STATUSES,
    UNCLEAR,
    Claim,
    Interval,
    _paper_range,
    decide,
    detectable,
    magnitude,
    overall,
    premise_status,
)


def claim_inputs(P: Paths, claims: list[Claim] | None = None) -> list[str]:
    """Every artifact the claims (their premises and margins too) read that tree `P` (a `Paths`)
    makes (the rule's inputs)."""
    out = set()
    for c in claims or CLAIMS:
        for fn in (c.inputs, c.premise.inputs if c.premise else None, c.margin.inputs if c.margin else None):
            try:
                out.update(str(p) for p in fn(P)) if fn else None
            except NotRun:
                pass
    return sorted(out)


def resolve_target(prefix: str, figures: dict[str, str] | None) -> str:
    """The registered figure whose id is `prefix` or starts with `prefix` + '_' (figure ids are the
    paper's numbers plus a name), else the prefix itself, marked as not drawn by this config."""
    figures = figures or {}
    hits = sorted(i for i in figures if i == prefix or i.startswith(prefix + "_"))
    return str(figures[hits[0]]) if hits else f"{prefix} (no figure registered for this config)"


def _judge_premise(ctx: Context, c: Claim) -> tuple[float, str, str]:
    """(threshold, premise status, premise text) of a claim: a margin's threshold from the compared
    method's gain (absent when it gains nothing), then the claim's own premise."""
    threshold, status, parts = c.threshold, "", []
    if c.margin is not None:
        try:
            g = c.margin.gain(ctx)
        except NotRun as e:
            threshold, status = np.nan, UNCLEAR
            parts.append(f"{c.margin.of}: not measured ({e}), so no margin")
        else:
            ci = f" [{g.lo:+.3f}, {g.hi:+.3f}]" if np.isfinite(g.lo) and np.isfinite(g.hi) else " (no interval)"
            if np.isfinite(g.value) and g.value > 0:
                threshold = -NI_FRACTION * g.value
                parts.append(f"{c.margin.of} {g.value:+.3f}{ci}: margin -{NI_FRACTION:g}x = {threshold:+.3f}")
                status = PRESENT if np.isfinite(g.lo) and g.lo > 0 else UNCLEAR
            else:
                threshold, status = np.nan, ABSENT
                parts.append(f"{c.margin.of} {g.value:+.3f}{ci}: no gain to be non-inferior within")
    if c.premise is not None and status != ABSENT:
        p = c.premise
        try:
            piv = p.measure(ctx)
        except NotRun as e:
            status = UNCLEAR
            parts.append(f"{p.text}: not measured ({e})")
        else:
            status = premise_status(piv, p)
            ci = (f" [{p.fmt.format(piv.lo)}, {p.fmt.format(piv.hi)}]" if np.isfinite(piv.lo) and np.isfinite(piv.hi)
                  else " (no interval)")
            parts.append(f"{p.text}: {p.quantity} = {p.fmt.format(piv.value)}{ci}, needs {p.relation} "
                         f"{p.fmt.format(p.threshold)}")
    return threshold, status, "; ".join(parts)


def build_rows(P: Paths, figures: dict[str, str] | None = None, claims: list[Claim] | None = None) -> pd.DataFrame:
    """Measure every claim on tree `P` (a `Paths`). Raises MissingArtifact naming every missing
    artifact at once."""
    ctx = Context(P)
    cfg = P.cfg
    rows, missing = [], []
    for c in claims or CLAIMS:
        plo, phi = _paper_range(c.paper_value) if c.paper_value is not None else (np.nan, np.nan)
        row = dict(id=c.id, paper=c.paper, claim=c.claim, paper_number=c.paper_number, quantity=c.quantity,
                   relation=c.relation, threshold=c.threshold, paper_lo=plo, paper_hi=phi, measured=np.nan,
                   ci_lo=np.nan, ci_hi=np.nan, ci_method="", detail="", measured_over_paper=np.nan,
                   scale=cfg["scale"], direction_status="", magnitude_status="", premise="", premise_status="",
                   status="", detectable=np.nan, reason="", target=resolve_target(c.target, figures), sources="")
        prem = ""
        try:
            sources = c.inputs(P)
            row["sources"] = " ".join(str(s) for s in sources)
            iv = c.measure(ctx)
            threshold, prem, prem_text = _judge_premise(ctx, c)
        except NotRun as e:
            iv = Interval(np.nan, np.nan, np.nan, "")
            row["reason"] = str(e)
            direction = NOT_RUN
        except MissingArtifact as e:
            missing.append(str(e))
            continue
        else:
            row.update(measured=iv.value, ci_lo=iv.lo, ci_hi=iv.hi, ci_method=iv.method, detail=iv.detail,
                       threshold=threshold, premise=prem_text, premise_status=prem)
            # a margin with no gain to be within: the direction against 0, for the reader only
            direction = decide(iv.lo, iv.hi, c.relation, threshold if np.isfinite(threshold) else 0.0)
            if direction == INCONCLUSIVE:
                row["detectable"] = detectable(iv.lo, iv.hi)
        mag, ratio = magnitude(iv.value, iv.lo, iv.hi, c.paper_value, c.scale_free)
        row.update(measured_over_paper=ratio, direction_status=direction, magnitude_status=mag,
                   status=overall(direction, mag, prem))
        row["fmt"] = c.fmt
        rows.append(row)
    if missing:
        raise MissingArtifact("artifacts the config makes are missing:\n  " + "\n  ".join(dict.fromkeys(missing)))
    return pd.DataFrame(rows)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _paper_text(r, fmt: str) -> str:
    """The paper's number as its words, then on our scale where it has one."""
    if not np.isfinite(r.paper_lo):
        return r.paper_number
    ours = fmt.format(r.paper_lo) if r.paper_lo == r.paper_hi else f"{fmt.format(r.paper_lo)} to {fmt.format(r.paper_hi)}"
    return f"{r.paper_number} (ours: {ours})"


def _measured_text(r, fmt: str) -> str:
    if r.direction_status == NOT_RUN:
        return f"— ({r.reason})"
    text = fmt.format(r.measured) + (f" [{fmt.format(r.ci_lo)}, {fmt.format(r.ci_hi)}]"
                                     if np.isfinite(r.ci_lo) and np.isfinite(r.ci_hi) else " (no interval)")
    if np.isfinite(r.detectable):
        text += f"; detectable here: ±{fmt.format(r.detectable).lstrip('+')}"
    return text + (f"; {r.detail}" if r.detail else "")


def _premise_cell(r) -> str:
    return f"{r.premise_status}: {r.premise}" if r.premise else "—"


def _threshold_text(r, fmt: str) -> str:
    return fmt.format(r.threshold) if np.isfinite(r.threshold) else "— (no margin)"


def legend() -> list[str]:
    """What the status columns mean (the rule is in code: `decide`, `magnitude`, `overall`)."""
    return [
        "direction (`decide`): for a claim `quantity > t`, reproduced when the 95% interval lies above t, "
        "contradicted when it lies below t, inconclusive when it contains t (the row then gives the smallest "
        f"effect this scale detects at {POWER:.0%} power), untestable when there is no interval (a single run); "
        "mirrored for `<`. t is the paper's bound, 0 for 'A beats B', and for 'A matches B' minus "
        f"{NI_FRACTION:g} x B's own gain (over the start policy, or over chance for an AUC), so the margin "
        "scales with what B achieves here.",
        "premise: the mechanism a claim rests on, measured here (vanilla's collapse, k <= 2's collapse, a "
        "critic that explains variance, a compared method that gains at all): present, absent or unclear by "
        "the same rule. When it is absent the data cannot judge the claim: premise absent.",
        "magnitude (`magnitude`), against the paper's own number on our scale: in CI when our interval "
        f"contains it; for scale-free quantities (AUC, % change of MSE, a coefficient) within "
        f"{MAGNITUDE_FACTOR:g}x when measured / paper lies in [1/{MAGNITUDE_FACTOR:g}, {MAGNITUDE_FACTOR:g}]; "
        "else off by Nx or opposite sign (accuracy points are never compared by a factor across scales); "
        "no paper number where the paper states none.",
        "status (`overall`): not run; premise absent; reproduced only when the direction is reproduced and the "
        f"paper's number is in CI (or, scale-free, within {MAGNITUDE_FACTOR:g}x); direction only when the side "
        "is right but the paper gives no number or its number is off; otherwise inconclusive, untestable "
        "(single run) or contradicted.",
        ("Intervals: RL accuracy and gains by a hierarchical bootstrap over start policies, seeds within each and "
         "benchmark problems (the column CI names the levels and their units), widened to the t interval over "
         "seeds where that is wider; others t over seeds with >= 2 seeds, else a bootstrap over the per-unit "
         "artifact."),
    ]


def _counts(df: pd.DataFrame) -> str:
    counts = df["status"].value_counts()
    return ", ".join(f"{s} {int(counts.get(s, 0))}" for s in STATUSES)


def _header_lines(scale: str, config_name: str, config_hash: str, commit: str, what: str,
                  origin: str = "") -> list[str]:
    lines = [f"Config `{config_name}` (hash `{config_hash}`), commit `{commit}`. Generated by `sparserl claims` "
             f"from cached artifacts (`sparserl.studies.claims`); {what}."]
    if origin:  # restored by `sparserl published rebuild`: the tables' commits, not this code's
        lines.append(f"Measured {origin}.")
    if scale != "paper":
        lines.append(f"**{scale.upper()} SCALE: not paper numbers.** These come from this scale's small policies "
                     "and tasks; they test that each piece behaves as the paper says, and never stand for the "
                     "papers' numbers, which are quoted beside them.")
    return lines


def to_markdown(df: pd.DataFrame, *, scale: str, config_name: str, config_hash: str, commit: str,
                origin: str = "") -> str:
    lines = [f"# Claims of the four papers, measured at scale `{scale}`", ""]
    for p in _header_lines(scale, config_name, config_hash, commit, "the CSV and HTML beside this file hold the "
                                                                        "same rows", origin):
        lines += [p, ""]
    lines += [f"- {item}" for item in legend()] + ["", f"Counts: {_counts(df)}.", "",
              "| # | paper | claim | paper's number | quantity (claim: relation threshold) | measured [95% CI] "
              "| CI | premise | direction | magnitude | status | target | sources |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(df.itertuples(), 1):
        fmt = r.fmt
        lines.append("| " + " | ".join(_cell(x) for x in (
            i, PAPERS.get(r.paper, r.paper), r.claim, _paper_text(r, fmt),
            f"{r.quantity}: {r.relation} {_threshold_text(r, fmt)}", _measured_text(r, fmt), r.ci_method or "—",
            _premise_cell(r), r.direction_status, r.magnitude_status, f"**{r.status}**", f"`{r.target}`",
            " ".join(f"`{s}`" for s in r.sources.split()))) + " |")
    lines.append("")
    return "\n".join(lines)


def to_html(df: pd.DataFrame, *, scale: str, config_name: str, config_hash: str, commit: str,
            origin: str = "") -> str:
    """The same table as one HTML page (for the Snakemake report, which shows HTML inline)."""
    from sparserl.studies.report_tables import css_class, html_page
    intro = [p.replace("**", "").replace("`", "") for p in
             _header_lines(scale, config_name, config_hash, commit, "CLAIMS.md and CLAIMS.csv hold the same rows",
                           origin)]
    intro.append(f"Counts: {_counts(df)}.")
    header = ["#", "paper", "claim", "paper's number", "quantity: relation threshold", "measured [95% CI]", "CI",
              "premise", "direction", "magnitude", "status", "target"]
    rows = [[i, PAPERS.get(r.paper, r.paper), r.claim, _paper_text(r, r.fmt),
             f"{r.quantity}: {r.relation} {_threshold_text(r, r.fmt)}", _measured_text(r, r.fmt), r.ci_method or "—",
             _premise_cell(r), r.direction_status, r.magnitude_status, (r.status, css_class(r.status)), r.target]
            for i, r in enumerate(df.itertuples(), 1)]
    return html_page(f"Claims of the four papers, measured at scale {scale}", intro, header, rows,
                     legend=[x.replace("`", "") for x in legend()])


def html_path(md_path) -> Path:
    """The HTML rendering's path: beside CLAIMS.md (the rule's `html` output)."""
    return Path(md_path).with_suffix(".html")


def write_claims(P: Paths, md_path, csv_path, *, config_name: str, figures: dict[str, str] | None = None,
                 claims: list[Claim] | None = None, html: str | Path | None = None) -> pd.DataFrame:
    """Measure the claims and write the markdown, the CSV and the HTML page (default beside the
    markdown) atomically, each with a manifest. `P`: the tree's `Paths` (its config: `P.cfg`)."""
    from sparserl.core.artifacts import (
        atomic_write_text,
        config_hash,
        git_commit,
        write_manifest,
        write_table,
    )
    cfg = P.cfg
    df = build_rows(P, figures, claims)
    from sparserl.core.published import origin_line
    head = dict(scale=cfg["scale"], config_name=config_name, config_hash=config_hash(cfg), commit=git_commit(),
                origin=origin_line(P.results))
    out = df.drop(columns="fmt")
    write_table(out, csv_path, cfg=cfg, extra={"claims": len(out)})
    for path, text in ((md_path, to_markdown(df, **head)), (html or html_path(md_path), to_html(df, **head))):
        atomic_write_text(path, text)
        write_manifest(path, rows=len(out), columns=None, cfg=cfg, extra={"csv": str(csv_path)})
    return out
