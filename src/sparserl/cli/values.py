"""`python -m sparserl v0-*`: the V0 value model's commands.

    sparserl v0-official --sample ../shared/data/v0_official_sample --out results/tiny/values/v0_official
    # the trajectory harvest and its tables: rules of workflow/rules/values.smk, which pass every path
"""
from __future__ import annotations

from pathlib import Path


def cmd_v0_official(args):
    from sparserl.core.config import load_config
    from sparserl.core.logs import get_logger
    from sparserl.values.v0.official import run_official, summarize
    from sparserl.values.v0.settings import v0_settings
    cfg = load_config(args.config)
    over = {}
    if args.epochs is not None:
        over["train"] = {"epochs": args.epochs}
    if args.head:
        over["head"] = {"kind": args.head, **({"model_path": args.model_path} if args.model_path else {})}
    s = v0_settings(cfg, **over)
    sample = args.sample or s.get("official_sample")
    if not sample:
        raise SystemExit("v0-official: pass --sample <folder> or set v0.official_sample")
    out = Path(args.out)
    log = get_logger("sparserl.v0").info
    table = run_official(sample, out, s, seeds=tuple(range(args.seeds)), threads=args.threads, log=log)
    with __import__("pandas").option_context("display.width", 200, "display.max_columns", 30):
        print(summarize(table).round(3).to_string())
    log(f"V0 official sample -> {out}")


def cmd_v0_harvest_run(args):
    from sparserl.core.config import load_config
    from sparserl.engines.harvest import run_harvest
    # the run's folder holds final/ (its output) and rollouts.parquet beside it
    rp = run_harvest(load_config(args.config), args.policy, run_dir=Path(args.out).parent, threads=args.threads)
    if Path(rp.rollouts).absolute() != Path(args.rollouts).absolute():  # OpenRLHF's run folder is absolute
        raise SystemExit(f"v0-harvest-run --rollouts {args.rollouts}: the run writes {rp.rollouts} (beside --out)")
    print(f"harvest run {args.policy} -> {rp.dir}")


def cmd_v0_harvest_values(args):
    from sparserl.core.config import load_config
    from sparserl.engines.harvest import harvest_values
    harvest_values(load_config(args.config), args.policy, policy_dir=args.policy_dir, final=args.final,
                   rollouts=args.rollouts, pool=args.pool, benchmarks=args.benchmarks, out=args.out,
                   threads=args.threads)


def cmd_v0_harvest_shard(args):
    from sparserl.core.config import load_config
    from sparserl.engines.harvest import harvest_values_shard
    harvest_values_shard(load_config(args.config), args.policy, args.shard, policy_dir=args.policy_dir,
                         final=args.final, benchmarks=args.benchmarks, out=args.out, threads=args.threads)


def cmd_v0_harvest_merge(args):
    from sparserl.core.config import load_config
    from sparserl.engines.harvest import harvest_merge
    harvest_merge(load_config(args.config), args.policy, shards=args.shards, rollouts=args.rollouts,
                  pool=args.pool, out=args.out)


def cmd_v0_harvest_all(args):
    from sparserl.core.config import load_config
    from sparserl.engines.harvest import harvest_all
    harvest_all(load_config(args.config), args.harvests, args.out)


def _policy_dirs(cmd: str, args) -> dict:
    """{policy name: checkpoint dir} from --policies and --labels (default: each dir's name)."""
    labels = args.labels or [Path(d).name for d in args.policies]
    if len(labels) != len(args.policies):
        raise SystemExit(f"{cmd} --labels: {len(labels)} labels for {len(args.policies)} --policies")
    return dict(zip(labels, args.policies))


def cmd_v0_table(args):
    from sparserl.core.config import load_config
    from sparserl.core.logs import get_logger
    from sparserl.values.v0.experiments import run_protocol
    t = run_protocol(load_config(args.config), args.protocol, harvest=args.harvest, embeddings=args.embeddings,
                     level_tables=[args.pool, *args.benchmarks], policies=_policy_dirs("v0-table", args),
                     out=args.out, predictions=args.predictions, model_file=args.model,
                     seed=args.seed, threads=args.threads, log=get_logger("sparserl.v0").info)
    cols = ["method", "intra_auc", "calibration_mse", "pairwise_acc", "pairs", "rows"]
    print(t[t["model"] == "all"][cols].round(3).to_string(index=False))


def cmd_v0_embed(args):
    import torch
    from sparserl.core.config import load_config
    from sparserl.core.logs import get_logger
    from sparserl.values.v0.experiments import harvest_embeddings
    from sparserl.values.v0.prior import pool_embeddings
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    log = get_logger("sparserl.v0").info
    if (args.pool is None) == (args.harvest is None):
        raise SystemExit("v0-embed: give --pool <train_pool.parquet> (V0's prior) or --harvest <harvest.parquet>")
    if args.pool is not None:
        t = pool_embeddings(cfg, None, Path(args.out), Path(args.pool), log=log, embedder_policy=args.embedder_policy)
    else:
        t = harvest_embeddings(cfg, args.harvest, args.out, log=log, embedder_policy=args.embedder_policy)
    print(f"{len(t.ids)} prompts, states {tuple(t.states.shape)} ({t.embedder}) -> {args.out}")


def cmd_v0_ablations(args):
    from sparserl.core.config import load_config
    from sparserl.core.logs import get_logger
    from sparserl.values.v0.experiments import run_ablations
    t = run_ablations(load_config(args.config), args.protocol, harvest=args.harvest, embeddings=args.embeddings,
                      out=args.out, seed=args.seed, threads=args.threads, log=get_logger("sparserl.v0").info,
                      base_predictions=args.base_predictions)
    print(t[["variant", "intra_auc", "calibration_mse", "pairwise_acc"]].round(3).to_string(index=False))


def cmd_v0_routing(args):
    from sparserl.core.config import load_config
    from sparserl.core.logs import get_logger
    from sparserl.values.v0.routing import run_routing
    t = run_routing(load_config(args.config), harvest=args.harvest, embeddings=args.embeddings,
                    predictions=args.predictions, policies=_policy_dirs("v0-routing", args), out=args.out,
                    log=get_logger("sparserl.v0").info)
    print(t.round(3).to_string(index=False))


def register(sub, add):
    p = add("v0-harvest-run", cmd_v0_harvest_run, "V0 harvest: a GRPO run of one policy with a checkpoint "
            "every v0.harvest.checkpoint_samples samples (resumable)", policy=True, threads=True)
    p.add_argument("--out", required=True, help="the run's final checkpoint folder "
                   "(values/harvest/runs/<policy>/final; the run's folder is its parent)")
    p.add_argument("--rollouts", required=True, help="the run's on-policy rollouts (beside --out)")

    def harvest_inputs(p, pool=True, run=True):
        if run:
            p.add_argument("--policy-dir", required=True, help="the start policy's checkpoint folder")
            p.add_argument("--final", required=True, help="the harvest run's final checkpoint folder")
            p.add_argument("--benchmarks", nargs="+", required=True,
                           help="the held-out queries: tasks/benchmarks/<name>.parquet, in config order")
        if pool:
            p.add_argument("--rollouts", required=True, help="the harvest run's rollouts.parquet")
            p.add_argument("--pool", required=True, help="training pool parquet (the on-policy rows' problems)")
        p.add_argument("--out", required=True, help="output parquet")
    harvest_inputs(add("v0-harvest-values", cmd_v0_harvest_values, "V0 harvest: avg@k of the policy and each "
                       "of its harvest checkpoints on the held-out queries, plus its on-policy rollouts (one "
                       "long table)", policy=True, threads=True))
    p = add("v0-harvest-shard", cmd_v0_harvest_shard, "V0 harvest, sharded: avg@k of checkpoints "
            "shard, shard + N, ... (N = v0.harvest.shards) on the held-out queries", policy=True, threads=True)
    p.add_argument("--shard", type=int, required=True, help="0 .. v0.harvest.shards - 1")
    harvest_inputs(p, pool=False)
    p = add("v0-harvest-merge", cmd_v0_harvest_merge, "V0 harvest, sharded: the shards' avg@k rows plus the "
            "on-policy rollouts, as one table (what v0-harvest-values writes)", policy=True)
    p.add_argument("--shards", nargs="+", required=True, help="the shard tables, shard 0 .. N-1")
    harvest_inputs(p, run=False)
    p = add("v0-harvest-all", cmd_v0_harvest_all, "V0 harvest: one long table of every harvested policy")
    p.add_argument("--harvests", nargs="+", required=True, help="each policy's harvest table")
    p.add_argument("--out", required=True, help="output parquet (values/harvest.parquet)")
    def harvest_states(p):
        p.add_argument("--harvest", required=True, help="the harvest table (values/harvest.parquet)")
        p.add_argument("--embeddings", required=True, help="its token states (rule v0_embeddings)")

    def fleet(p):
        p.add_argument("--policies", nargs="+", required=True, help="each harvested policy's checkpoint folder")
        p.add_argument("--labels", nargs="*", default=None, help="their names (default: each folder's name)")
    p = add("v0-embed", cmd_v0_embed, "V0's embedder over every harvest prompt, once (the token "
            "states Tables 1, 2 and 6 and routing read), or with --pool over the RL pool (V0's prior)",
            threads=True)
    p.add_argument("--harvest", default=None, help="the harvest table whose prompts are embedded")
    p.add_argument("--pool", default=None, help="embed this RL pool (V0's prior) instead")
    p.add_argument("--out", required=True, help="the token states (.pt)")
    p.add_argument("--embedder-policy", type=Path, default=None,
                   help="the policy folder v0.embedder of kind policy reads (its rule passes it)")
    p = add("v0-table", cmd_v0_table, "V0 against every baseline on the harvest under one protocol "
            "(Table 1: sequential, Table 2: strict)", threads=True)
    p.add_argument("--protocol", choices=["sequential", "strict"], required=True)
    p.add_argument("--seed", type=int, default=0)
    harvest_states(p)
    p.add_argument("--pool", required=True, help="training pool parquet (each query's level)")
    p.add_argument("--benchmarks", nargs="+", required=True, help="benchmark parquets (held-out queries' levels)")
    fleet(p)
    p.add_argument("--out", required=True, help="metrics table (values/eval/v0_<protocol>.parquet)")
    p.add_argument("--predictions", required=True, help="predictions table (values/eval/v0_<protocol>_predictions.parquet)")
    p.add_argument("--model", required=True, help="V0's weights (values/models/v0/v0.<protocol>.seed<seed>.pt)")
    p = add("v0-routing", cmd_v0_routing, "Figure 5 (right): route each query to the cheapest policy V0 "
            "predicts will solve it; accuracy-cost frontier against matrix factorisation and single policies")
    harvest_states(p)
    p.add_argument("--predictions", required=True, help="v0-table's strict predictions")
    fleet(p)
    p.add_argument("--out", required=True, help="output parquet (values/eval/v0_routing.parquet)")
    p = add("v0-ablations", cmd_v0_ablations, "Table 6: V0 with one piece changed at a time "
            "(connector, loss, frozen vs tuned head)", threads=True)
    p.add_argument("--protocol", choices=["sequential", "strict"], default="strict")
    p.add_argument("--seed", type=int, default=0)
    harvest_states(p)
    p.add_argument("--base-predictions", default=None,
                   help="v0-table's predictions of the same protocol and seed: the unchanged "
                        "variant's row is scored from them instead of retraining that model")
    p.add_argument("--out", required=True, help="output parquet (values/eval/v0_ablations.parquet)")
    p = add("v0-official", cmd_v0_official, "train and evaluate V0 and its baselines on the V0 paper's "
            "released sample (intra-context AUC, calibration MSE, pairwise calibration)", threads=True)
    p.add_argument("--sample", default=None, help="the sample folder (default: v0.official_sample)")
    p.add_argument("--out", required=True, help="output folder (results/<scale>/values/v0_official)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--head", choices=["gp", "tabpfn"], default=None)
    p.add_argument("--model-path", default=None, help="TabPFN checkpoint for --head tabpfn")
