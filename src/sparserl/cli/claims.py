"""`python -m sparserl claims`: the claims table of the four papers (sparserl.studies.claims), from
cached artifacts only; workflow/rules/claims.smk calls it. `python -m sparserl ranking-html`: the
head-to-head ranking as an HTML page for the Snakemake report (workflow/rules/head_to_head.smk).

    sparserl claims --config configs/tiny.yaml                # paper_figures/tiny/CLAIMS.md, .csv and .html
    sparserl claims --config configs/tiny.yaml --list         # the claims and what each reads
    sparserl ranking-html --config configs/tiny.yaml --out results/tiny/head_to_head/ranking.html
"""
from __future__ import annotations

from pathlib import Path


def _figures(cfg, P) -> dict[str, str]:
    """Registered figure id -> its PNG in the layout `P`: the claims' targets."""
    from sparserl.figures import list_figures
    return {f.id: str(f.output(P)) for f in list_figures(cfg)}


def cmd_claims(args):
    from sparserl.core.config import load_config
    from sparserl.methods.run import layout
    from sparserl.studies.claims import CLAIMS, BadArtifact, MissingArtifact, NotRun, html_path, write_claims
    cfg = load_config(args.config)
    P = layout(cfg)
    if args.list:
        for c in CLAIMS:
            try:
                reads = ", ".join(str(p) for p in c.inputs(P))
            except NotRun as e:
                reads = f"not run at this scale: {e}"
            paper = "" if c.paper_value is None else f" (paper: {c.paper_value})"
            print(f"{c.id:32s} {c.paper:12s} {c.quantity} {c.relation} {c.threshold:g}{paper}\n    {reads}")
        return
    md, csv = Path(args.out_md or P.claims_md()), Path(args.out_csv or P.claims_csv())
    page = Path(args.out_html or html_path(md))
    name = args.config_name or "+".join(Path(c).name for c in args.config)
    try:
        df = write_claims(P, md, csv, config_name=name, figures=_figures(cfg, P), html=page)
    except (MissingArtifact, BadArtifact) as e:  # they name the file(s) and the fix: no traceback
        raise SystemExit(f"claims: {e}")
    counts = df["status"].value_counts().to_dict()
    print(f"{len(df)} claims ({', '.join(f'{k} {v}' for k, v in counts.items())}) -> {md}, {csv}, {page}")


def cmd_ranking_html(args):
    from sparserl.core.config import load_config
    from sparserl.methods.run import layout
    from sparserl.studies.report_tables import write_ranking_html
    cfg = load_config(args.config)
    if not cfg.get("rl"):
        raise SystemExit("ranking-html: the config has no `rl` section, so there is no head-to-head ranking")
    name = args.config_name or "+".join(Path(c).name for c in args.config)
    src = args.ranking or layout(cfg).head_to_head("ranking")
    try:
        out = write_ranking_html(cfg, src, args.out, config_name=name)
    except (FileNotFoundError, ValueError) as e:  # they name the file and the fix
        raise SystemExit(f"ranking-html: {e}")
    print(f"ranking -> {out}")


def register(sub, add) -> None:
    """Add `claims` to the `sparserl` parser (`add` is cli.build_parser's helper)."""
    p = add("claims", cmd_claims, "the claims table of the four papers (CLAIMS.md and .csv) from cached artifacts")
    p.add_argument("--out-md", help="output markdown (default: paper_figures/{scale}/CLAIMS.md)")
    p.add_argument("--out-csv", help="output CSV (default: paper_figures/{scale}/CLAIMS.csv)")
    p.add_argument("--out-html", help="output HTML page for the Snakemake report (default: beside --out-md)")
    p.add_argument("--config-name", help="the config file(s) the run was given, for the header "
                                         "(default: the --config files' names)")
    p.add_argument("--list", action="store_true", help="list the claims and the artifacts each reads")
    r = add("ranking-html", cmd_ranking_html, "the head-to-head ranking as an HTML page (for `snakemake --report`)")
    r.add_argument("--ranking", help="the ranking to render (default: results/{scale}/head_to_head/ranking.parquet)")
    r.add_argument("--out", required=True, help="output HTML (the rule's: results/{scale}/head_to_head/ranking.html)")
    r.add_argument("--config-name", help="the config file(s) the run was given, for the header")
