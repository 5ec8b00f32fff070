"""`python -m sparserl head-to-head`: the head-to-head of every RL method (workflow/rules/head_to_head.smk).

    sparserl head-to-head --config configs/tiny.yaml   # results/tiny/head_to_head/{ranking,pairs,curves}.parquet
    sparserl head-to-head-aggregates --config configs/tiny.yaml   # {iqm,improvement,profiles}.parquet (rliable)

Reads the RL runs' cached tables only (metrics, evaluation, the final per-problem scores); the
rules of the CIs and ties are in `sparserl.studies.head_to_head`.
"""
from __future__ import annotations


def _layout(args, command: str):
    """The command's config and its results layout, built once; a config without `rl` is refused."""
    from sparserl.core.config import load_config
    from sparserl.methods.run import layout
    cfg = load_config(args.config)
    if not cfg.get("rl"):
        raise SystemExit(f"{command}: the config has no `rl` section, so there are no runs to compare")
    return layout(cfg)


def cmd_head_to_head(args):
    from sparserl.studies.head_to_head import TABLES, HeadToHeadError, write_head_to_head
    P = _layout(args, "head-to-head")
    try:
        out = write_head_to_head(P, **({"n_boot": args.bootstrap} if args.bootstrap else {}),
                                 out=dict(zip(TABLES, args.out)) if args.out else None)
    except (HeadToHeadError, FileNotFoundError) as e:
        raise SystemExit(f"head-to-head: {e}")
    for name, path in out.items():
        print(f"{name} -> {path}")


def cmd_aggregates(args):
    from sparserl.studies.head_to_head import HeadToHeadError
    from sparserl.studies.aggregates import write_aggregates
    P = _layout(args, "head-to-head-aggregates")
    try:
        out = write_aggregates(P, **({"reps": args.bootstrap} if args.bootstrap else {}),
                               out=dict(zip(("iqm", "improvement", "profiles"), args.out)) if args.out else None)
    except (HeadToHeadError, FileNotFoundError) as e:
        raise SystemExit(f"head-to-head-aggregates: {e}")
    for name, path in out.items():
        print(f"{name} -> {path}")


def register(sub, add) -> None:
    p = add("head-to-head", cmd_head_to_head, "rank every RL method: accuracy CIs, ties, curves vs rollouts and wall time")
    # the default lives in the study (BOOTSTRAP), not imported here: building the parser stays cheap
    p.add_argument("--bootstrap", type=int, default=None,
                   help="bootstrap resamples for the pair CIs and 1-seed CIs (default: the study's, 2000)")
    p.add_argument("--out", nargs=3, metavar=("RANKING", "PAIRS", "CURVES"), default=None,
                   help="the three tables (default: results/{scale}/head_to_head/{ranking,pairs,curves}.parquet)")
    p = add("head-to-head-aggregates", cmd_aggregates,
            "IQM, probability of improvement and performance profiles over benchmarks x seeds (rliable)")
    p.add_argument("--bootstrap", type=int, default=None,
                   help="rliable's bootstrap resamples for every interval (default: the study's, 2000)")
    p.add_argument("--out", nargs=3, metavar=("IQM", "IMPROVEMENT", "PROFILES"), default=None,
                   help="the three tables (default: results/{scale}/head_to_head/{iqm,improvement,profiles}.parquet)")
