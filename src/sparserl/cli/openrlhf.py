"""`python -m sparserl openrlhf-args | openrlhf-launch`: paper-scale RL through OpenRLHF.

Wire into `sparserl.cli.build_parser` with ``register(sub, add)`` (``add`` is its helper that
adds a subcommand with ``--config``). Both commands take ``--method NAME --seed S --out DIR``;
``--out`` is the run's final HF model directory (metrics.parquet and openrlhf/ go beside it).

    python -m sparserl openrlhf-args   --config configs/paper.yaml --method grpo_g16 --seed 0 --out results/paper/rl/grpo_g16/seed0/final
    python -m sparserl openrlhf-launch --config configs/paper.yaml --method grpo_g16 --seed 0 --out results/paper/rl/grpo_g16/seed0/final
"""
from __future__ import annotations

import shlex
from pathlib import Path


def _common(p):
    p.add_argument("--method", required=True, help="method name (configs/methods/<name>.yaml)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="final model directory of the run")
    return p


def _run(args):
    """(cfg, the run): the run in --out's parent (rl/<method>/seed<s>, or V0's
    harvest folder), absolute (Ray workers do not share the driver's cwd)."""
    from sparserl.core.config import ConfigError, load_config
    from sparserl.methods.run import resolve_run

    cfg = load_config(args.config)
    if "rl" not in cfg:
        raise ConfigError(f"{', '.join(args.config)}: no 'rl' section")
    return cfg, resolve_run(cfg, args.method, args.seed, root=Path(args.out).absolute().parent)


def cmd_openrlhf_args(args):
    from sparserl.methods.spec import load_method

    from sparserl.engines.openrlhf.launcher import openrlhf_argv
    from sparserl.engines.openrlhf.parser import parse_args

    cfg, run = _run(args)
    argv = openrlhf_argv(cfg, load_method(args.method), args.seed, run.paths,
                         policy_path=str(Path(run.reads.policy).absolute()), v0_model=run.reads.v0_model,
                         v0_pool=run.reads.pool, v0_embeddings=run.reads.v0_embeddings)
    if args.check:
        parse_args(argv)  # OpenRLHF's own validation on the rebuilt parser
    if args.lines:
        print("\n".join(argv))
    else:
        print(shlex.join(argv))


def cmd_openrlhf_launch(args):
    from sparserl.engines.openrlhf.launcher import run

    cfg, rec = _run(args)
    argv = run(cfg, rec, config_paths=args.config, dry_run=args.dry_run)
    if args.dry_run:
        print(shlex.join(argv))


def register(subparsers, add) -> None:
    """Add the two subcommands to sparserl's CLI (`add(name, fn, help)` returns the subparser)."""
    p = _common(add("openrlhf-args", cmd_openrlhf_args,
                    "print the OpenRLHF train_ppo_ray argument list for a method + config"))
    p.add_argument("--lines", action="store_true", help="one argument per line instead of one shell line")
    p.add_argument("--check", action="store_true",
                   help="also validate with OpenRLHF's rebuilt parser (needs openrlhf installed)")
    p = _common(add("openrlhf-launch", cmd_openrlhf_launch,
                    "start Ray on the SLURM allocation and train a method with OpenRLHF"))
    p.add_argument("--dry-run", action="store_true", help="validate and print the arguments, start nothing")


__all__ = ["cmd_openrlhf_args", "cmd_openrlhf_launch", "register"]
