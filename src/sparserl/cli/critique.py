"""`python -m sparserl critique-*`: Le Critique's stage (workflow/rules/critique.smk).

    sparserl critique-world                 # the envs' demonstrations + the world's tokenizer
    sparserl critique-pretrain --threads 1  # policy c on those demonstrations (resumable)
    sparserl critique-start --env rg        # the start policy's held-out reward on one env
    sparserl critique-train --experiment rg_k8 --method lc_tether --seed 0
    sparserl critique-summary               # every run's metrics in one table

Paper scale (rollout.backend vllm, critique.policy_hub): no world, no pre-training;
    sparserl critique-start --env rg        # the hub policy's held-out reward (vLLM, one GPU)
    sparserl critique-openrlhf --experiment rg_k8 --method lc_tether --seed 0   # OpenRLHF on Ray
"""
from __future__ import annotations


def _cfg(args):
    from sparserl.core.config import load_config
    return load_config(args.config)


def cmd_world(args):
    from sparserl.core.artifacts import write_table
    from sparserl.core.logs import get_logger
    from sparserl.envs.world import CritiquePaths, build_corpus, critique_world
    from sparserl.models.tokenizer import train_tokenizer
    cfg = _cfg(args)
    CP, world = CritiquePaths(cfg), critique_world(cfg)
    corpus = build_corpus(cfg)
    write_table(corpus, CP.corpus(), cfg=cfg, extra={"rows_per_env": corpus.groupby("env").size().to_dict()})
    tok = train_tokenizer([p + a for p, a in zip(corpus["problem"], corpus["answer"])],
                          world["tokenizer"]["vocab_size"], CP.tokenizer(), world["tokenizer"]["max_length"])
    get_logger("sparserl.critique").info(f"critique world: {len(corpus)} rows, tokenizer {len(tok)} -> {CP.root}")


def cmd_pretrain(args):
    from sparserl.envs.world import WORLD_POLICY, critique_world
    from sparserl.models.policies import pretrain
    pretrain(critique_world(_cfg(args)), WORLD_POLICY, threads=args.threads)


def cmd_start(args):
    from sparserl.core.artifacts import write_json
    from sparserl.core.paths import rl_engine
    from sparserl.envs.world import CritiquePaths
    cfg = _cfg(args)
    if rl_engine(cfg) == "openrlhf":  # paper scale: the hub policy on vLLM
        from sparserl.engines.openrlhf.critique import start_reward
    else:
        from sparserl.engines.local.critique import start_reward
    out = start_reward(cfg, args.env)
    write_json(out, CritiquePaths(cfg).start_eval(args.env))
    print(out)


def cmd_train(args):
    from sparserl.engines.local.critique import train
    print(train(_cfg(args), args.experiment, args.method, args.seed, threads=args.threads))


def cmd_openrlhf(args):
    import shlex

    from sparserl.engines.openrlhf.critique import run_critique
    argv = run_critique(_cfg(args), args.experiment, args.method, args.seed, dry_run=args.dry_run,
                        config_paths=args.config)
    if args.dry_run:
        print(shlex.join(argv))


def cmd_summary(args):
    from sparserl.studies.le_critique import write_runs_table
    print(write_runs_table(_cfg(args)))


def register(sub, add) -> None:
    add("critique-world", cmd_world, "Le Critique: the envs' pre-training demonstrations and tokenizer")
    add("critique-pretrain", cmd_pretrain, "Le Critique: pre-train policy c (resumable)", threads=True)
    p = add("critique-start", cmd_start, "Le Critique: held-out reward of the start policy on an env")
    p.add_argument("--env", required=True)
    p = add("critique-train", cmd_train, "Le Critique: one RL run (experiment x method x seed; resumable)",
            threads=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--seed", type=int, required=True)
    p = add("critique-openrlhf", cmd_openrlhf, "Le Critique at paper scale: one run on OpenRLHF (Ray on the "
            "SLURM allocation); writes the run's metrics.parquet and summary.json")
    p.add_argument("--experiment", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--dry-run", action="store_true", help="validate and print the OpenRLHF arguments, start nothing")
    add("critique-summary", cmd_summary, "Le Critique: every run's metrics and summary in one table")
