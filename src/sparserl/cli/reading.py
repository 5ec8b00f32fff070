"""`python -m sparserl reading`: the reading of a scale's claims and ranking as Markdown
(sparserl.studies.reading); rule `reading` (workflow/rules/claims.smk) writes
paper_figures/<scale>/RESULTS.md, and `--copy-to` puts a built one into the docs:

    snakemake --cores 2 paper_figures/small/RESULTS.md       # or: python -m sparserl published rebuild small
    python -m sparserl reading --config configs/small.yaml configs/overlays/small_v0.yaml --copy-to docs/results_small.md
"""
from __future__ import annotations

from pathlib import Path


def cmd_reading(args):
    from sparserl.core.artifacts import atomic_write_text
    from sparserl.core.config import load_config
    from sparserl.methods.run import layout
    from sparserl.studies.reading import FIELDS, Inputs, ReadingError, write_reading
    cfg = load_config(args.config)
    P = layout(cfg)
    built = Path(args.workdir) / P.results_md()
    if args.copy_to:
        # the page is the DAG's output: copy the built one, never a fresh one beside the tables' run
        if not built.is_file():
            raise SystemExit(f"reading: {built} is missing; build it first (`snakemake --cores 2 "
                             f"{P.results_md()}` in {args.workdir}, or `python -m sparserl published "
                             f"rebuild {cfg['scale']}`)")
        atomic_write_text(args.copy_to, built.read_text())
        print(f"{built} -> {args.copy_to}")
        return
    out = Path(args.out_md or built)
    name = args.config_name or "+".join(Path(c).name for c in args.config)
    # the tables the rule passes (its named inputs), else this tree's
    inputs = Inputs(**{**Inputs.of(P).named(), **{k: Path(v) for k in FIELDS if (v := getattr(args, k))}})
    try:
        write_reading(P, out, config_name=name, inputs=inputs)
    except ReadingError as e:  # names the file and the fix: no traceback
        raise SystemExit(f"reading: {e}")
    print(f"reading -> {out}")


def register(sub, add) -> None:
    p = add("reading", cmd_reading, "what the claims and the ranking say, per paper, as Markdown "
            "(paper_figures/<scale>/RESULTS.md; --copy-to puts it into docs/)")
    p.add_argument("--out-md", help="output Markdown (default: paper_figures/{scale}/RESULTS.md)")
    for k in ("claims", "ranking", "pairs", "iqm", "summary"):  # reading.FIELDS; the parser imports no study
        p.add_argument(f"--{k}", help=f"the {k} table (default: this config's; rule reading passes its input.{k})")
    p.add_argument("--config-name", help="the config file(s) the run was given, for the header "
                                         "(default: the --config files' names)")
    p.add_argument("--copy-to", help="copy the built RESULTS.md here (e.g. docs/results_small.md) instead of "
                                     "writing it")
    p.add_argument("--workdir", default=".", help="with --copy-to: the workdir that built it (default: here; "
                                                  "a `published rebuild --out DIR`'s DIR)")
