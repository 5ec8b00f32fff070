"""`python -m sparserl make-validation | lr-tune-run | lr-tune-select`: learning rates tuned per
method family on a validation split of the pool's side (`rl.lr_tuning`, workflow/rules/tuning.smk):
    sparserl make-validation --config configs/small.yaml                       # tasks/validation.parquet
    sparserl lr-tune-run --config configs/small.yaml --family grpo --factor 2 --seed 0 --threads 1
    sparserl lr-tune-select --config configs/small.yaml                        # tuning/lr.parquet, lr.json
"""
from __future__ import annotations

from sparserl.core.logs import get_logger

log = get_logger("sparserl.cli")


def _cfg(args):
    from sparserl.core.config import load_config
    return load_config(args.config)


def cmd_make_validation(args):
    from sparserl.core.artifacts import read_table, write_table
    from sparserl.core.config import ConfigError
    from sparserl.core.paths import Paths
    from sparserl.engines.lr_tuning import check
    from sparserl.tasks.validation import make_validation
    cfg = _cfg(args)
    s = check(cfg)
    if s is None:
        raise ConfigError("make-validation: rl.lr_tuning.enabled is not true in the config (the split "
                          "serves the lr tuning only)")
    P = Paths(cfg)
    pool = read_table(P.train_pool())
    df = make_validation(cfg, int(s["validation_size"]), pool, read_table(P.pretrain_corpus()),
                         [read_table(P.benchmark(b)) for b in P.benchmark_names()])
    write_table(df, P.validation_split(), cfg=cfg,
                extra={"levels": df.groupby("source").size().to_dict(), "asked": int(s["validation_size"])})
    log.info(f"validation split ({len(df)} problems) -> {P.validation_split()}")


def cmd_tune_run(args):
    from sparserl.engines.lr_tuning import grid_factor, tune_run
    cfg = _cfg(args)
    tune_run(cfg, args.family, grid_factor(cfg, args.factor), args.seed, threads=args.threads)


def cmd_tune_select(args):
    from sparserl.engines.lr_tuning import select
    select(_cfg(args))


def register(sub, add) -> None:
    add("make-validation", cmd_make_validation, "the lr tuning's validation split: pool-side problems in "
        "neither the pool, the corpus nor a benchmark")
    p = add("lr-tune-run", cmd_tune_run, "one lr tuning run (a family's representative at factor x rl.lr), "
            "scored on the validation split", threads=True)
    p.add_argument("--family", required=True, help="a key of rl.lr_tuning.families, e.g. grpo")
    p.add_argument("--factor", required=True, help="a factor of rl.lr_tuning.grid, e.g. 0.5")
    p.add_argument("--seed", type=int, required=True)
    add("lr-tune-select", cmd_tune_select, "each family's best factor -> tuning/lr.parquet and lr.json")
