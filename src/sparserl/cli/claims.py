"""`python -m sparserl claims`: the claims table of the four papers (sparserl.studies.claims), from
cached artifacts only; workflow/rules/claims.smk calls it.

    sparserl claims --config configs/tiny.yaml                # paper_figures/tiny/CLAIMS.md and .csv
    sparserl claims --config configs/tiny.yaml --list         # the claims and what each reads
"""
from __future__ import annotations

from pathlib import Path


def _figures(cfg) -> dict[str, str]:
    """Registered figure id -> its PNG for this config: the claims' targets."""
    from sparserl.figures import list_figures
    return {f.id: str(f.output(cfg)) for f in list_figures(cfg)}


def cmd_claims(args):
    from sparserl.core.config import load_config
    from sparserl.core.paths import Paths
    from sparserl.studies.claims import CLAIMS, BadArtifact, MissingArtifact, NotRun, write_claims
    cfg = load_config(args.config)
    if args.list:
        for c in CLAIMS:
            try:
                reads = ", ".join(str(p) for p in c.inputs(cfg))
            except NotRun as e:
                reads = f"not run at this scale: {e}"
            print(f"{c.id:32s} {c.paper:12s} {c.quantity} {c.relation} {c.threshold:g}\n    {reads}")
        return
    P = Paths(cfg)
    md, csv = Path(args.out_md or P.claims_md()), Path(args.out_csv or P.claims_csv())
    name = args.config_name or "+".join(Path(c).name for c in args.config)
    try:
        df = write_claims(cfg, md, csv, config_name=name, figures=_figures(cfg))
    except (MissingArtifact, BadArtifact) as e:  # they name the file(s) and the fix: no traceback
        raise SystemExit(f"claims: {e}")
    counts = df["status"].value_counts().to_dict()
    print(f"{len(df)} claims ({', '.join(f'{k} {v}' for k, v in counts.items())}) -> {md}, {csv}")


def register(sub, add) -> None:
    """Add `claims` to the `sparserl` parser (`add` is cli.build_parser's helper)."""
    p = add("claims", cmd_claims, "the claims table of the four papers (CLAIMS.md and .csv) from cached artifacts")
    p.add_argument("--out-md", help="output markdown (default: paper_figures/{scale}/CLAIMS.md)")
    p.add_argument("--out-csv", help="output CSV (default: paper_figures/{scale}/CLAIMS.csv)")
    p.add_argument("--config-name", help="the config file(s) the run was given, for the header "
                                         "(default: the --config files' names)")
    p.add_argument("--list", action="store_true", help="list the claims and the artifacts each reads")
