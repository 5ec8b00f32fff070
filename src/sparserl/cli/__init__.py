"""`python -m sparserl <command>`: every Snakemake rule calls one of these; the logic lives in src/."""
from __future__ import annotations

import argparse
import os
import sys
import time

from sparserl.core.logs import get_logger, setup_logging

log = get_logger("sparserl.cli")


def _cfg(args):
    import sparserl.engines.openrlhf.placement  # noqa: F401  (registers its check of rl.openrlhf at load)
    from sparserl.core.config import load_config
    return load_config(args.config)


def cmd_validate(args):
    cfg = _cfg(args)
    print(f"ok: {', '.join(args.config)} (scale={cfg['scale']})")


def cmd_preflight(args):
    from sparserl.core.paths import Paths
    from sparserl.cli.preflight import problems
    from sparserl.envs.sandbox import self_test
    cfg = _cfg(args)
    bad = problems(cfg, None, Paths(cfg).results)
    for k, (ok, detail) in self_test().items():
        print(f"  sandbox {k:16s} {'holds' if ok else 'FAILS'}: {detail}")
    for line in bad:
        log.error(line)
    if not bad:
        print(f"ok: this machine runs {', '.join(args.config)}")
    return 1 if bad else 0


def cmd_make_tasks(args):
    from sparserl.core.artifacts import write_table
    from sparserl.core.paths import Paths
    cfg = _cfg(args)
    P = Paths(cfg)
    if cfg["tasks"]["source"] != "procedural":
        raise SystemExit("make-tasks builds procedural tasks; at hub scale use `fetch-data`")
    from sparserl.tasks import procedural
    pool = procedural.make_train_pool(cfg)
    write_table(pool, P.train_pool(), cfg=cfg, extra={"levels": pool.groupby("source").size().to_dict()})
    corpus = procedural.make_pretrain_corpus(cfg)
    write_table(corpus, P.pretrain_corpus(), cfg=cfg,
                extra={"split": procedural.task_split(cfg["tasks"]),
                       "noisy_targets": int(corpus["noisy"].sum()),
                       "pool_problems_in_corpus": int(corpus["problem"].isin(set(pool["problem"])).sum())})
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, P.benchmark(name), cfg=cfg)
    log.info(f"tasks -> {P.stage('tasks')}")


def cmd_fetch_data(args):
    from sparserl.data.download import fetch_for_config
    cfg = _cfg(args)
    fetch_for_config(cfg)


def cmd_train_tokenizer(args):
    import pandas as pd
    from sparserl.core.paths import Paths
    from sparserl.tasks import corpus_targets, format_prompt
    from sparserl.models.tokenizer import train_tokenizer
    cfg = _cfg(args)
    P = Paths(cfg)
    corpus = pd.read_parquet(P.pretrain_corpus())
    texts = [format_prompt(cfg, p) + t for p, t in zip(corpus["problem"], corpus_targets(cfg, corpus))]
    tok = train_tokenizer(texts, cfg["tokenizer"]["vocab_size"], P.tokenizer(),
                          cfg["tokenizer"]["max_length"])
    log.info(f"tokenizer ({len(tok)} tokens) -> {P.tokenizer()}")


def cmd_pretrain(args):
    from sparserl.models.policies import pretrain
    cfg = _cfg(args)
    out = pretrain(cfg, args.policy, threads=args.threads)
    log.info(f"policy {args.policy} -> {out}")


def cmd_passrate(args):
    from sparserl.evaluation import measure_passrate
    cfg = _cfg(args)
    measure_passrate(cfg, args.policy, threads=args.threads)


def cmd_passrate_summary(args):
    from sparserl.evaluation import summarize_passrates
    summarize_passrates(_cfg(args))


def cmd_evaluate(args):
    from sparserl.evaluation import evaluate_policy
    cfg = _cfg(args)
    evaluate_policy(cfg, args.policy, threads=args.threads)


def cmd_world_report(args):
    from sparserl.evaluation.world import world_report
    if args.checkpoint and not args.out:
        raise SystemExit("world-report --checkpoint: give --out too (the DAG's world.json is the "
                         "report of the config's policies)")
    ckpts = dict(c.split("=", 1) if "=" in c else (c, c) for c in args.checkpoint or [])
    world_report(_cfg(args), out_path=args.out, threads=args.threads, checkpoints=ckpts or None)


def cmd_eval_summary(args):
    from sparserl.evaluation import summarize_evals
    summarize_evals(_cfg(args))


def cmd_mc_values(args):
    from sparserl.values.mcvalues import mc_values
    cfg = _cfg(args)
    mc_values(cfg, args.policy, args.n, args.out, threads=args.threads, seed_offset=args.seed_offset,
              job_shard=(args.shard, args.shards) if args.shards > 1 else None)


def cmd_fetch_models(args):
    from sparserl.data.hub_models import fetch_models
    fetch_models(_cfg(args))


def cmd_mc_values_merge(args):
    from sparserl.values.mcvalues import merge_mc_values
    merge_mc_values(_cfg(args), args.policy, args.n, args.parts, args.out)


def cmd_rl_train(args):
    from sparserl.engines.local.trainer import NonFiniteError, train
    try:
        out = train(_cfg(args), args.method, args.seed, threads=args.threads)
    except NonFiniteError as e:  # a diverged run: one line, not a traceback
        log.error(f"rl-train stopped: {e}")
        return 3
    log.info(f"rl run -> {out}")


def cmd_rl_eval(args):
    from sparserl.engines.report import evaluate_run
    evaluate_run(_cfg(args), args.method, args.seed, threads=args.threads)


def cmd_sizing_table(args):
    import tempfile
    from sparserl.core.config import load_config
    from sparserl.engines.sizing import dry_run_jobs, sizing_table, storage_table
    cfg = load_config(args.config)
    with tempfile.TemporaryDirectory() as d:
        jobs = dry_run_jobs(os.getcwd(), d, args.config)
    print(sizing_table(cfg, jobs) + "\n\n" + storage_table(cfg, jobs))


def cmd_rl_summary(args):
    from sparserl.engines.report import summarize_runs
    summarize_runs(_cfg(args))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sparserl", description=__doc__)

    class Version(argparse.Action):  # the git call runs only when --version is asked
        def __call__(self, parser, namespace, values, option_string=None):
            from sparserl.cli.show import version
            print(version())
            parser.exit()

    ap.add_argument("--version", nargs=0, action=Version, help="print the version (and git commit) and exit")
    sub = ap.add_subparsers(dest="command", required=True)

    def add(name, fn, help, policy=False, threads=False):
        p = sub.add_parser(name, help=help)
        p.add_argument("--config", nargs="+", default=["configs/tiny.yaml"],
                       help="config file(s), merged in order (default: configs/tiny.yaml)")
        if policy:
            p.add_argument("--policy", required=True, help="policy name from the config, e.g. s or m@p50")
        if threads:
            p.add_argument("--threads", type=int, default=1)
        p.set_defaults(fn=fn)
        return p

    add("validate-config", cmd_validate, "validate config files against the schema")
    add("preflight", cmd_preflight, "check this machine's prerequisites for a config (the DAG's "
        "onstart runs it): the CodeIO sandbox's self-test, a writable results folder")
    add("make-tasks", cmd_make_tasks, "generate the procedural training pool, corpus and benchmarks")
    add("fetch-data", cmd_fetch_data, "download (or copy local) paper-scale datasets and benchmarks")
    add("fetch-models", cmd_fetch_models, "download every hub model the config names into models/ "
        "(rule fetch_models, on a machine with internet)")
    add("train-tokenizer", cmd_train_tokenizer, "train the tiny BPE tokenizer offline")
    add("pretrain", cmd_pretrain, "pre-train a tiny policy (resumable)", policy=True, threads=True)
    add("passrate", cmd_passrate, "pass rates of a policy on the training pool", policy=True, threads=True)
    add("passrate-summary", cmd_passrate_summary, "collect pass rates and check their spread")
    add("evaluate", cmd_evaluate, "evaluate a policy on the benchmarks", policy=True, threads=True)
    add("eval-summary", cmd_eval_summary, "one table of every evaluated policy")
    p = add("world-report", cmd_world_report, "greedy vs sampled accuracy of the start policies on the "
            "pool and the benchmarks, and their overlap with the corpus", threads=True)
    p.add_argument("--out", default=None, help="output JSON (default: results/<scale>/policies/world.json)")
    p.add_argument("--checkpoint", nargs="*", metavar="[LABEL=]DIR",
                   help="report these checkpoint dirs instead (e.g. an RL run's checkpoints/step00030)")
    p = add("mc-values", cmd_mc_values, "n rollouts per training-pool prompt of a policy "
            "(BASIS reference cache, oracle values); resumable", policy=True, threads=True)
    p.add_argument("--n", type=int, required=True, help="rollouts per prompt")
    p.add_argument("--out", required=True, help="output parquet")
    p.add_argument("--seed-offset", type=int, default=0)
    p.add_argument("--shard", type=int, default=0, help="this job's shard (0..shards-1)")
    p.add_argument("--shards", type=int, default=1, help="jobs the prompts are split over (basis.reference_shards)")
    p = add("mc-values-merge", cmd_mc_values_merge, "join the shards of `mc-values --shards K` into one "
            "table (rule reference_cache)", policy=True)
    p.add_argument("--n", type=int, required=True, help="rollouts per prompt")
    p.add_argument("--out", required=True, help="output parquet")
    p.add_argument("parts", nargs="+", help="the shard parquets, 0..K-1")
    for name, fn, doc in (("rl-train", cmd_rl_train, "one local RL run (resumable)"),
                          ("rl-eval", cmd_rl_eval, "evaluate a run's final and intermediate checkpoints")):
        p = add(name, fn, doc, threads=True)
        p.add_argument("--method", required=True, help="configs/methods/<name>.yaml")
        p.add_argument("--seed", type=int, required=True)
    add("rl-summary", cmd_rl_summary, "one table of every RL run (metrics + evaluation)")
    add("sizing-table", cmd_sizing_table, "docs/cluster.md's sizing and storage tables: each GPU job of the "
        "paper dry run (run from the repo root) against its estimate (sparserl.engines.sizing)")
    from sparserl.cli.clean import register as register_clean
    register_clean(sub, add)
    from sparserl.cli.studies import register as register_studies
    register_studies(sub, add)
    from sparserl.cli.figures import register as register_figures
    register_figures(sub, add)
    from sparserl.cli.openrlhf import register as register_openrlhf
    register_openrlhf(sub, add)
    from sparserl.cli.grading import register as register_grading; register_grading(sub, add)
    from sparserl.cli.values import register as register_values
    register_values(sub, add)
    from sparserl.cli.critique import register as register_critique
    register_critique(sub, add)
    from sparserl.cli.ood import register as register_ood; register_ood(sub, add)
    from sparserl.cli.lr_tuning import register as register_lr_tuning; register_lr_tuning(sub, add)
    from sparserl.cli.head_to_head import register as register_head_to_head; register_head_to_head(sub, add)
    from sparserl.cli.claims import register as register_claims; register_claims(sub, add)
    from sparserl.cli.reading import register as register_reading; register_reading(sub, add)
    from sparserl.cli.show import register as register_show; register_show(sub, add)
    from sparserl.cli.config import register as register_config; register_config(sub, add)
    from sparserl.cli.provenance import register as register_provenance
    register_provenance(sub, add)
    from sparserl.cli.world_compare import register as register_world_compare
    register_world_compare(sub, add)
    from sparserl.cli.published import register as register_published
    register_published(sub, add)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    from sparserl.core.artifacts import CorruptCheckpointError, name_os_error
    from sparserl.core.config import ConfigError
    t0 = time.time()
    try:
        rc = args.fn(args) or 0
    except ConfigError as e:
        log.error(f"config error: {e}")
        return 2
    except BrokenPipeError:  # `sparserl methods | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CorruptCheckpointError, OSError) as e:  # named: the file, the cause and the fix
        log.debug("traceback", exc_info=True)
        # a write outside the atomic writers (a removal, a log) gets its fix here
        log.error(str(name_os_error(e) if isinstance(e, OSError) else e))
        return 1
    if args.command not in ("show", "methods", "provenance"):
        log.info(f"{args.command} done in {time.time() - t0:.1f}s")
    return rc
