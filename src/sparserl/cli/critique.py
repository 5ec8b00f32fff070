"""`python -m sparserl critique-*`: Le Critique's stage (workflow/rules/critique.smk). Each command
reads and writes the paths it is given (the DAG resolves them; results/tiny/critique/ below).

    C=results/tiny/critique
    sparserl critique-world --corpus $C/tasks/pretrain_corpus.parquet --tokenizer $C/tokenizer
    sparserl critique-pretrain --corpus $C/tasks/pretrain_corpus.parquet --tokenizer $C/tokenizer \
        --out $C/policies/c --snapshots $C/policies/c@p50 $C/policies/c@p75 --threads 1   # resumable
    sparserl critique-start --env rg --policy $C/policies/c --out $C/start_eval/rg.json
    sparserl critique-train --experiment rg_k8 --method lc_tether --seed 0 --policy $C/policies/c \
        --metrics $C/runs/rg_k8/lc_tether/seed0/metrics.parquet --summary $C/runs/rg_k8/lc_tether/seed0/summary.json
    sparserl critique-summary --runs $C/runs/*/*/seed*/summary.json --starts $C/start_eval/*.json \
        --out-runs $C/runs.parquet --out-final $C/final.parquet

Paper scale (rollout.backend vllm, critique.policy_hub): no world, no pre-training;
    sparserl critique-start --env rg --out $C/start_eval/rg.json   # the hub policy's held-out reward (vLLM)
    sparserl critique-openrlhf --experiment rg_k8 --method lc_tether --seed 0   # OpenRLHF on Ray
(the DAG also passes --policy models/<org>/<name> --metrics .../metrics.parquet --summary .../summary.json,
as critique-train's; without them, the config's layout)
"""
from __future__ import annotations


def _cfg(args):
    from sparserl.core.config import load_config
    return load_config(args.config)


def cmd_world(args):
    from sparserl.core.artifacts import write_table
    from sparserl.core.logs import get_logger
    from sparserl.envs.world import build_corpus, critique_world
    from sparserl.models.tokenizer import train_tokenizer
    cfg = _cfg(args)
    world = critique_world(cfg)
    corpus = build_corpus(cfg)
    write_table(corpus, args.corpus, cfg=cfg, extra={"rows_per_env": corpus.groupby("env").size().to_dict()})
    tok = train_tokenizer([p + a for p, a in zip(corpus["problem"], corpus["answer"])],
                          world["tokenizer"]["vocab_size"], args.tokenizer, world["tokenizer"]["max_length"])
    get_logger("sparserl.critique").info(f"critique world: {len(corpus)} rows -> {args.corpus}, "
                                         f"tokenizer {len(tok)} -> {args.tokenizer}")


def cmd_pretrain(args):
    from sparserl.envs.world import WORLD_POLICY, critique_world
    from sparserl.models.policies import pretrain
    pretrain(critique_world(_cfg(args)), WORLD_POLICY, threads=args.threads, corpus=args.corpus,
             tokenizer=args.tokenizer, out=args.out, snapshots=args.snapshots)


def cmd_start(args):
    from sparserl.core.artifacts import write_json
    from sparserl.core.paths import rl_engine
    cfg = _cfg(args)
    if rl_engine(cfg) == "openrlhf":  # paper scale: the hub policy on vLLM
        from sparserl.methods.run import layout
        from sparserl.engines.openrlhf.critique import start_reward
        out = start_reward(cfg, args.env, layout(cfg).critique)
    else:
        from sparserl.engines.local.critique import start_reward
        if not args.policy:
            raise SystemExit("critique-start: give --policy, policy c's checkpoint dir "
                             "(results/<scale>/critique/policies/c)")
        out = start_reward(cfg, args.env, args.policy)
    write_json(out, args.out)
    print(out)


def _run_dir(args, command: str):
    """The run folder of --summary (the trainer writes its whole run folder: final/, tensorboard/),
    with --metrics beside it."""
    from pathlib import Path
    run_dir = Path(args.summary).parent
    if Path(args.metrics) != run_dir / "metrics.parquet":
        raise SystemExit(f"{command}: --metrics {args.metrics} is not beside --summary {args.summary}; "
                         f"give {run_dir / 'metrics.parquet'}")
    return run_dir


def cmd_train(args):
    from sparserl.engines.local.critique import train
    run_dir = _run_dir(args, "critique-train")
    print(train(_cfg(args), args.experiment, args.method, args.seed, threads=args.threads, run_dir=run_dir,
                policy=args.policy))


def cmd_openrlhf(args):
    import shlex

    from pathlib import Path

    from sparserl.engines.openrlhf.critique import run_critique
    from sparserl.methods.run import layout, resolve_critique_run
    cfg = _cfg(args)
    given = [a for a in ("policy", "metrics", "summary") if getattr(args, a)]
    if given and len(given) < 3:
        raise SystemExit("critique-openrlhf: give --policy, --metrics and --summary together (the DAG's), or none")
    if given:
        run_dir, policy = _run_dir(args, "critique-openrlhf"), Path(args.policy)
    else:  # by hand: the config's layout
        CP = layout(cfg).critique
        run_dir, policy = CP.run(args.experiment, args.method, args.seed).dir, CP.policy(args.experiment)
    # absolute: Ray workers do not share the driver's cwd
    rec = resolve_critique_run(cfg, args.experiment, args.method, args.seed, root=run_dir.absolute(),
                               policy=policy.absolute())
    argv = run_critique(cfg, rec, dry_run=args.dry_run, config_paths=args.config)
    if args.dry_run:
        print(shlex.join(argv))


def cmd_summary(args):
    from sparserl.studies.le_critique import write_runs_table
    print(write_runs_table(_cfg(args), args.runs, args.starts, args.out_runs, args.out_final))


def register(sub, add) -> None:
    p = add("critique-world", cmd_world, "Le Critique: the envs' pre-training demonstrations and tokenizer")
    p.add_argument("--corpus", required=True, help="the demonstrations table to write (.parquet)")
    p.add_argument("--tokenizer", required=True, help="the tokenizer folder to write")
    p = add("critique-pretrain", cmd_pretrain, "Le Critique: pre-train policy c (resumable)", threads=True)
    p.add_argument("--corpus", required=True, help="the demonstrations table (critique-world's --corpus)")
    p.add_argument("--tokenizer", required=True, help="the tokenizer folder (critique-world's --tokenizer)")
    p.add_argument("--out", required=True, help="policy c's folder (results/<scale>/critique/policies/c)")
    p.add_argument("--snapshots", nargs="*", default=[],
                   help="one folder c@<tag> per pretrain.snapshots fraction, beside --out")
    p = add("critique-start", cmd_start, "Le Critique: held-out reward of the start policy on an env")
    p.add_argument("--env", required=True)
    p.add_argument("--policy", help="policy c's checkpoint dir (tiny/small; paper scale: the config's hub policy)")
    p.add_argument("--out", required=True, help="the JSON to write (start_eval/<env>.json)")
    p = add("critique-train", cmd_train, "Le Critique: one RL run (experiment x method x seed; resumable)",
            threads=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--policy", required=True, help="the start policy's checkpoint dir (policy c)")
    p.add_argument("--metrics", required=True, help="the run's metrics.parquet (in the run folder)")
    p.add_argument("--summary", required=True, help="the run's summary.json; its folder is the run's")
    p = add("critique-openrlhf", cmd_openrlhf, "Le Critique at paper scale: one run on OpenRLHF (Ray on the "
            "SLURM allocation); writes the run's metrics.parquet and summary.json")
    p.add_argument("--experiment", required=True)
    p.add_argument("--method", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--policy", help="the start policy (the hub model's local copy, rule fetch_models)")
    p.add_argument("--metrics", help="the run's metrics.parquet (in the run folder)")
    p.add_argument("--summary", help="the run's summary.json; its folder is the run's")
    p.add_argument("--dry-run", action="store_true", help="validate and print the OpenRLHF arguments, start nothing")
    p = add("critique-summary", cmd_summary, "Le Critique: every run's metrics and summary in one table")
    p.add_argument("--runs", nargs="+", required=True, help="each run's summary.json (metrics.parquet beside it)")
    p.add_argument("--starts", nargs="+", required=True, help="each env's start_eval/<env>.json")
    p.add_argument("--out-runs", required=True, help="runs.parquet to write")
    p.add_argument("--out-final", required=True, help="final.parquet to write")
