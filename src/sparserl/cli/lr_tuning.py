"""`python -m sparserl make-validation | lr-tune-run | lr-tune-select`: learning rates and steps
chosen per batch setting on a validation split of the pool's side (`rl.lr_tuning`,
workflow/rules/tuning.smk; the rule is `engines.lr_tuning.validation_argmax`):
    sparserl make-validation --config configs/small.yaml                       # tasks/validation.parquet
    sparserl lr-tune-run --config configs/small.yaml --setting grpo_p32_r256_s100 --lr 2.5e-05 --seed 0
    sparserl lr-tune-select --config configs/small.yaml          # tuning/lr.parquet, lr.csv, lr.md, lr.json
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
    from sparserl.engines.lr_tuning import grid_lr, tune_run
    cfg = _cfg(args)
    tune_run(cfg, args.setting, grid_lr(cfg, args.lr), args.seed, threads=args.threads)


def cmd_tune_select(args):
    from sparserl.engines.lr_tuning import select
    select(_cfg(args))


def register(sub, add) -> None:
    add("make-validation", cmd_make_validation, "the lr tuning's validation split: pool-side problems in "
        "neither the pool, the corpus nor a benchmark")
    p = add("lr-tune-run", cmd_tune_run, "one tuning run (a batch setting's method at one lr of "
            "rl.lr_tuning.grid), its checkpoints scored on the validation split", threads=True)
    p.add_argument("--setting", required=True, help="a batch setting of rl.methods, e.g. grpo_p32_r256_s100 "
                   "(engines.lr_tuning.setting_of)")
    p.add_argument("--lr", required=True, help="a rate of rl.lr_tuning.grid, e.g. 2.5e-05")
    p.add_argument("--seed", type=int, required=True)
    add("lr-tune-select", cmd_tune_select, "the validation rule (validation_argmax): each setting's (lr, steps) "
        "-> tuning/lr.parquet, lr.csv, lr.md and lr.json")
