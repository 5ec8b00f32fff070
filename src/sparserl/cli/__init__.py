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
    from sparserl.cli.preflight import problems
    from sparserl.methods.run import layout
    from sparserl.envs.sandbox import self_test
    cfg = _cfg(args)
    bad = problems(cfg, None, layout(cfg).results)
    for k, (ok, detail) in self_test().items():
        print(f"  sandbox {k:16s} {'holds' if ok else 'FAILS'}: {detail}")
    for line in bad:
        log.error(line)
    if not bad:
        print(f"ok: this machine runs {', '.join(args.config)}")
    return 1 if bad else 0


def _named_benchmarks(cmd: str, paths, cfg) -> None:
    """Stop when the benchmark files are not the config's benchmarks (`Paths.benchmark_names`)."""
    from pathlib import Path
    got = [Path(p).stem for p in paths]
    from sparserl.core.paths import benchmark_names
    want = benchmark_names(cfg)
    if got != want:
        raise SystemExit(f"{cmd} --benchmarks: files {got} are not the config's benchmarks {want} "
                         "(tasks/benchmarks/<name>.parquet, in config order)")


def cmd_make_tasks(args):
    from pathlib import Path
    from sparserl.core.artifacts import write_table
    cfg = _cfg(args)
    if cfg["tasks"]["source"] != "procedural":
        raise SystemExit("make-tasks builds procedural tasks; at hub scale use `fetch-data`")
    _named_benchmarks("make-tasks", args.benchmarks, cfg)
    from sparserl.tasks import procedural
    pool = procedural.make_train_pool(cfg)
    write_table(pool, Path(args.pool), cfg=cfg, extra={"levels": pool.groupby("source").size().to_dict()})
    corpus = procedural.make_pretrain_corpus(cfg)
    write_table(corpus, Path(args.corpus), cfg=cfg,
                extra={"split": procedural.task_split(cfg["tasks"]),
                       "noisy_targets": int(corpus["noisy"].sum()),
                       "pool_problems_in_corpus": int(corpus["problem"].isin(set(pool["problem"])).sum())})
    files = {Path(p).stem: Path(p) for p in args.benchmarks}
    for name, df in procedural.make_benchmarks(cfg).items():
        write_table(df, files[name], cfg=cfg)
    log.info(f"tasks -> {Path(args.pool).parent}")


def cmd_fetch_data(args):
    from sparserl.data.download import fetch_for_config
    cfg = _cfg(args)
    _named_benchmarks("fetch-data", args.benchmarks, cfg)
    fetch_for_config(cfg, pool=args.pool, benchmarks=args.benchmarks)


def cmd_train_tokenizer(args):
    from pathlib import Path
    import pandas as pd
    from sparserl.tasks import corpus_targets, format_prompt
    from sparserl.models.tokenizer import train_tokenizer
    cfg = _cfg(args)
    corpus = pd.read_parquet(args.corpus)
    texts = [format_prompt(cfg, p) + t for p, t in zip(corpus["problem"], corpus_targets(cfg, corpus))]
    tok = train_tokenizer(texts, cfg["tokenizer"]["vocab_size"], Path(args.out),
                          cfg["tokenizer"]["max_length"])
    log.info(f"tokenizer ({len(tok)} tokens) -> {args.out}")


def cmd_pretrain(args):
    from sparserl.models.policies import pretrain
    cfg = _cfg(args)
    out = pretrain(cfg, args.policy, threads=args.threads, corpus=args.corpus, tokenizer=args.tokenizer,
                   out=args.out, snapshots=args.snapshots)
    log.info(f"policy {args.policy} -> {out}")


def cmd_passrate(args):
    from sparserl.evaluation import measure_passrate
    cfg = _cfg(args)
    measure_passrate(cfg, args.policy, policy_dir=args.policy_dir, pool=args.pool, out=args.out,
                     cache=args.cache, threads=args.threads)


def cmd_passrate_summary(args):
    from sparserl.evaluation import summarize_passrates
    summarize_passrates(_cfg(args), args.passrates, args.out)


def cmd_evaluate(args):
    from sparserl.evaluation import evaluate_policy
    cfg = _cfg(args)
    _named_benchmarks("evaluate", args.benchmarks, cfg)
    evaluate_policy(cfg, args.policy, policy_dir=args.policy_dir, benchmarks=args.benchmarks, out=args.out,
                    curve=args.curve, threads=args.threads)


def cmd_world_report(args):
    from sparserl.evaluation.world import world_report
    cfg = _cfg(args)
    _named_benchmarks("world-report", args.benchmarks, cfg)
    models = dict(c.split("=", 1) if "=" in c else (c, c) for c in args.checkpoint or [])
    if args.policies:
        from pathlib import Path
        labels = args.labels or [Path(d).name for d in args.policies]
        if len(labels) != len(args.policies):
            raise SystemExit(f"world-report --labels: {len(labels)} labels for {len(args.policies)} --policies")
        models.update(zip(labels, args.policies))
    if not models:
        raise SystemExit("world-report: give --policies (the config's world policies' dirs, "
                         "results/<scale>/policies/<name>) or --checkpoint [LABEL=]DIR")
    world_report(cfg, models, pool=args.pool, benchmarks=args.benchmarks, corpus=args.corpus,
                 tokenizer=args.tokenizer, out=args.out, threads=args.threads)


def cmd_eval_summary(args):
    from sparserl.evaluation import summarize_evals
    summarize_evals(_cfg(args), args.evals, args.out)


def _rule_input(args, name: str, cfg, find):
    """`args.<name>`, the rule's input, else `find(P)` in the config's layout (run by hand)."""
    given = getattr(args, name)
    if given is not None:
        return given
    from sparserl.methods.run import layout
    return find(layout(cfg))


def cmd_mc_values(args):
    from sparserl.values.mcvalues import mc_values
    cfg = _cfg(args)
    policy_dir = _rule_input(args, "policy_dir", cfg, lambda P: P.policy(args.policy))
    pool = _rule_input(args, "pool", cfg, lambda P: P.train_pool())
    mc_values(cfg, args.policy, args.n, args.out, policy_dir=policy_dir, pool=pool, threads=args.threads,
              seed_offset=args.seed_offset, job_shard=(args.shard, args.shards) if args.shards > 1 else None)


def cmd_fetch_models(args):
    from sparserl.data.hub_models import fetch_models
    _cfg(args)  # validates the config the DAG ran with
    bad = [m for m in args.models if "=" not in m]
    if bad:
        raise SystemExit(f"fetch-models --models: {bad[0]!r} is not NAME=DIR (e.g. Qwen/Qwen3-4B=models/Qwen/Qwen3-4B)")
    fetch_models(dict(m.split("=", 1) for m in args.models))


def cmd_mc_values_merge(args):
    from sparserl.values.mcvalues import merge_mc_values
    cfg = _cfg(args)
    merge_mc_values(cfg, args.policy, args.n, args.parts, args.out,
                    pool=_rule_input(args, "pool", cfg, lambda P: P.train_pool()))


def _placed_run(cfg, args):
    """The run of --method/--seed (`methods.run.resolve_run`), in the folder of --out (its final/,
    as rule rl_train passes it) when given: the same key, the DAG's paths."""
    from pathlib import Path
    from sparserl.methods.run import placed, resolve_run
    run = resolve_run(cfg, args.method, args.seed)
    if args.out is None:
        return run
    if Path(args.out).name != run.paths.final.name:
        raise SystemExit(f"rl-train --out {args.out}: not a run's final checkpoint folder "
                         f"(.../<method>/seed<s>/{run.paths.final.name}); pass the run's, e.g. {run.paths.final}")
    return placed(run, Path(args.out).parent)


def cmd_rl_train(args):
    from sparserl.engines.local.trainer import NonFiniteError, Trainer
    cfg = _cfg(args)
    try:
        out = Trainer(cfg, _placed_run(cfg, args), threads=args.threads).run()
    except NonFiniteError as e:  # a diverged run: one line, not a traceback
        log.error(f"rl-train stopped: {e}")
        return 3
    log.info(f"rl run -> {out}")


def cmd_rl_eval(args):
    from sparserl.engines.report import evaluate_run
    from sparserl.methods.run import resolve_run
    cfg = _cfg(args)
    benchmarks = _rule_input(args, "benchmarks", cfg, lambda P: [P.benchmark(b) for b in P.benchmark_names()])
    _named_benchmarks("rl-eval", benchmarks, cfg)
    evaluate_run(cfg, resolve_run(cfg, args.method, args.seed), benchmarks, threads=args.threads)


def cmd_sizing_table(args):
    import tempfile
    from sparserl.core.config import load_config
    from sparserl.engines.sizing import dry_run_jobs, sizing_table, storage_table
    from sparserl.methods.run import layout
    P = layout(load_config(args.config))
    with tempfile.TemporaryDirectory() as d:
        jobs = dry_run_jobs(os.getcwd(), d, args.config)
    print(sizing_table(P, jobs) + "\n\n" + storage_table(P, jobs))


def cmd_rl_summary(args):
    from sparserl.engines.report import summarize_runs
    from sparserl.methods.run import layout
    cfg = _cfg(args)
    summarize_runs(cfg, layout(cfg), out_runs=args.out_runs, out_summary=args.out_summary)


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
    p = add("make-tasks", cmd_make_tasks, "generate the procedural training pool, corpus and benchmarks")
    p.add_argument("--pool", required=True, help="training pool parquet (results/<scale>/tasks/train_pool.parquet)")
    p.add_argument("--corpus", required=True, help="pre-training corpus parquet")
    p.add_argument("--benchmarks", nargs="+", required=True,
                   help="one parquet per config benchmark, tasks/benchmarks/<name>.parquet")
    p = add("fetch-data", cmd_fetch_data, "download (or copy local) paper-scale datasets and benchmarks")
    p.add_argument("--pool", required=True, help="training pool parquet")
    p.add_argument("--benchmarks", nargs="+", required=True,
                   help="one parquet per config benchmark, tasks/benchmarks/<name>.parquet")
    p = add("fetch-models", cmd_fetch_models, "download every hub model the config names into models/ "
            "(on a host with internet; compute jobs run offline)")
    p.add_argument("--models", nargs="+", required=True, metavar="NAME=DIR",
                   help="hub name and its local directory, one per model (rule fetch_models)")
    p = add("train-tokenizer", cmd_train_tokenizer, "train the tiny BPE tokenizer offline")
    p.add_argument("--corpus", required=True, help="pre-training corpus parquet")
    p.add_argument("--out", required=True, help="tokenizer folder (results/<scale>/tokenizer)")
    p = add("pretrain", cmd_pretrain, "pre-train a tiny policy (resumable)", policy=True, threads=True)
    p.add_argument("--corpus", required=True, help="pre-training corpus parquet")
    p.add_argument("--tokenizer", required=True, help="tokenizer folder")
    p.add_argument("--out", required=True, help="policy folder (results/<scale>/policies/<name>)")
    p.add_argument("--snapshots", nargs="*", default=[],
                   help="one folder <name>@<tag> per pretrain.snapshots fraction")
    p = add("passrate", cmd_passrate, "pass rates of a policy on the training pool", policy=True, threads=True)
    p.add_argument("--policy-dir", required=True, help="the policy's checkpoint folder")
    p.add_argument("--pool", required=True, help="training pool parquet")
    p.add_argument("--cache", nargs="?", default=None,
                   help="its reference cache (basis/reference/<policy>.parquet) to read the rates off")
    p.add_argument("--out", required=True, help="output JSON (policies/<policy>.passrate.json)")
    p = add("passrate-summary", cmd_passrate_summary, "collect pass rates and check their spread")
    p.add_argument("--passrates", nargs="+", required=True, help="each pre-trained policy's passrate JSON")
    p.add_argument("--out", required=True, help="output JSON (policies/passrates.json)")
    p = add("evaluate", cmd_evaluate, "evaluate a policy on the benchmarks", policy=True, threads=True)
    p.add_argument("--policy-dir", required=True, help="the policy's checkpoint folder (or hub copy)")
    p.add_argument("--benchmarks", nargs="+", required=True,
                   help="one parquet per config benchmark, tasks/benchmarks/<name>.parquet")
    p.add_argument("--out", required=True, help="evaluation table (eval/<policy>/eval.parquet)")
    p.add_argument("--curve", required=True, help="its pass@k curve (eval/<policy>/eval_pass_at_k.parquet)")
    p = add("eval-summary", cmd_eval_summary, "one table of every evaluated policy")
    p.add_argument("--evals", nargs="+", required=True, help="each policy's evaluation table")
    p.add_argument("--out", required=True, help="output parquet (eval/summary.parquet)")
    p = add("world-report", cmd_world_report, "greedy vs sampled accuracy of the start policies on the "
            "pool and the benchmarks, and their overlap with the corpus", threads=True)
    p.add_argument("--policies", nargs="*", default=[], help="policy folders (the config's world policies)")
    p.add_argument("--labels", nargs="*", default=None, help="their names (default: each folder's name)")
    p.add_argument("--checkpoint", nargs="*", metavar="[LABEL=]DIR",
                   help="checkpoint dirs to report too (e.g. an RL run's checkpoints/step00030)")
    p.add_argument("--pool", required=True, help="training pool parquet")
    p.add_argument("--benchmarks", nargs="+", required=True,
                   help="one parquet per config benchmark, tasks/benchmarks/<name>.parquet")
    p.add_argument("--corpus", default=None, help="pre-training corpus parquet (the overlap's third set)")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (corpus answer lengths)")
    p.add_argument("--out", required=True, help="output JSON (results/<scale>/policies/world.json)")
    p = add("mc-values", cmd_mc_values, "n rollouts per training-pool prompt of a policy "
            "(BASIS reference cache, oracle values); resumable", policy=True, threads=True)
    p.add_argument("--n", type=int, required=True, help="rollouts per prompt")
    p.add_argument("--out", required=True, help="output parquet")
    p.add_argument("--seed-offset", type=int, default=0)
    p.add_argument("--shard", type=int, default=0, help="this job's shard (0..shards-1)")
    p.add_argument("--shards", type=int, default=1, help="jobs the prompts are split over (basis.reference_shards)")
    p.add_argument("--policy-dir", default=None, help="the policy's checkpoint folder (the rule's input; "
                   "default: the config's for --policy)")
    p.add_argument("--pool", default=None, help="the training pool parquet (the rule's input; default: the config's)")
    p = add("mc-values-merge", cmd_mc_values_merge, "join the shards of `mc-values --shards K` into one "
            "table (rule reference_cache)", policy=True)
    p.add_argument("--n", type=int, required=True, help="rollouts per prompt")
    p.add_argument("--out", required=True, help="output parquet")
    p.add_argument("--pool", default=None, help="the training pool parquet: the rows' order (the rule's input; "
                   "default: the config's)")
    p.add_argument("parts", nargs="+", help="the shard parquets, 0..K-1")
    for name, fn, doc in (("rl-train", cmd_rl_train, "one local RL run (resumable)"),
                          ("rl-eval", cmd_rl_eval, "evaluate a run's final and intermediate checkpoints")):
        p = add(name, fn, doc, threads=True)
        p.add_argument("--method", required=True, help="configs/methods/<name>.yaml")
        p.add_argument("--seed", type=int, required=True)
        if name == "rl-train":
            p.add_argument("--out", default=None, help="the run's final checkpoint folder, the run in its parent "
                           "(rule rl_train's; default results/<scale>/rl/<method>/seed<s>/final)")
        else:
            p.add_argument("--benchmarks", nargs="+", default=None, help="one parquet per config benchmark, "
                           "tasks/benchmarks/<name>.parquet (rule rl_eval's; default the config's)")
    p = add("rl-summary", cmd_rl_summary, "one table of every RL run (metrics + evaluation)")
    p.add_argument("--out-runs", default=None, help="the per-run table (rule rl_summary's; default rl/runs.parquet)")
    p.add_argument("--out-summary", default=None, help="the per-method table (default rl/summary.parquet)")
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
