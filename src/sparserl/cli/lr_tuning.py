"""`python -m sparserl make-validation | lr-tune-run | lr-tune-select`: learning rates and steps
chosen per batch setting on a validation split of the pool's side (`rl.lr_tuning`,
workflow/rules/tuning.smk; the rule is `engines.lr_tuning.validation_argmax`). Each command reads
and writes the paths it is given (the DAG resolves them):
    R=results/small T="--pool $R/tasks/train_pool.parquet --corpus $R/tasks/pretrain_corpus.parquet
                       --benchmarks $R/tasks/benchmarks/*.parquet"
    sparserl make-validation --config configs/small.yaml $T --out $R/tasks/validation.parquet
    sparserl lr-tune-run --config configs/small.yaml --setting grpo_p32_r256_s100 --lr 2.5e-05 --seed 0 $T \
        --validation $R/tasks/validation.parquet --out $R/tuning/grpo_p32_r256_s100/lr2.5e-05/seed0/validation.parquet
    sparserl lr-tune-select --config configs/small.yaml --tables $R/tuning/*/lr*/seed*/validation.parquet \
        --validation $R/tasks/validation.parquet --out-table $R/tuning/lr.parquet --out-csv $R/tuning/lr.csv \
        --out-md $R/tuning/lr.md --out-json $R/tuning/lr.json
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
    from sparserl.engines.lr_tuning import check
    from sparserl.tasks.validation import make_validation
    cfg = _cfg(args)
    s = check(cfg)
    if s is None:
        raise ConfigError("make-validation: rl.lr_tuning.enabled is not true in the config (the split "
                          "serves the lr tuning only)")
    df = make_validation(cfg, int(s["validation_size"]), read_table(args.pool), read_table(args.corpus),
                         [read_table(b) for b in args.benchmarks])
    write_table(df, args.out, cfg=cfg,
                extra={"levels": df.groupby("source").size().to_dict(), "asked": int(s["validation_size"])})
    log.info(f"validation split ({len(df)} problems) -> {args.out}")


def cmd_tune_run(args):
    from sparserl.engines.lr_tuning import grid_lr, tune_run
    cfg = _cfg(args)
    tune_run(cfg, args.setting, grid_lr(cfg, args.lr), args.seed, args.out, args.validation, args.pool, args.corpus,
             args.benchmarks, threads=args.threads)


def cmd_tune_select(args):
    from sparserl.engines.lr_tuning import select
    select(_cfg(args), args.tables, args.validation, args.out_table, args.out_csv, args.out_md, args.out_json)


def _tasks_args(p) -> None:
    p.add_argument("--pool", required=True, help="the RL pool (tasks/train_pool.parquet)")
    p.add_argument("--corpus", required=True, help="the pre-training corpus (tasks/pretrain_corpus.parquet)")
    p.add_argument("--benchmarks", nargs="*", default=[], help="every benchmark table (tasks/benchmarks/*.parquet)")


def register(sub, add) -> None:
    p = add("make-validation", cmd_make_validation, "the lr tuning's validation split: pool-side problems in "
        "neither the pool, the corpus nor a benchmark")
    _tasks_args(p)
    p.add_argument("--out", required=True, help="the validation split to write (tasks/validation.parquet)")
    p = add("lr-tune-run", cmd_tune_run, "one tuning run (a batch setting's method at one lr of "
            "rl.lr_tuning.grid), its checkpoints scored on the validation split", threads=True)
    p.add_argument("--setting", required=True, help="a batch setting of rl.methods, e.g. grpo_p32_r256_s100 "
                   "(engines.lr_tuning.setting_of)")
    p.add_argument("--lr", required=True, help="a rate of rl.lr_tuning.grid, e.g. 2.5e-05")
    p.add_argument("--seed", type=int, required=True)
    _tasks_args(p)
    p.add_argument("--validation", required=True, help="the validation split (make-validation's output)")
    p.add_argument("--out", required=True, help="the run's validation.parquet; its folder is the run's")
    p = add("lr-tune-select", cmd_tune_select, "the validation rule (validation_argmax): each setting's (lr, steps) "
            "-> tuning/lr.parquet, lr.csv, lr.md and lr.json")
    p.add_argument("--tables", nargs="+", required=True, help="every tuning run's validation.parquet")
    p.add_argument("--validation", required=True, help="the validation split the runs were scored on")
    p.add_argument("--out-table", required=True, help="lr.parquet to write")
    p.add_argument("--out-csv", required=True, help="lr.csv to write")
    p.add_argument("--out-md", required=True, help="lr.md to write")
    p.add_argument("--out-json", required=True, help="lr.json to write (the choice the trainer reads)")
