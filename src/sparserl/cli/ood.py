"""`python -m sparserl ood-*`: BASIS Table 2's out-of-domain evaluation (workflow/rules/ood.smk).

Tiny and small scale (`ood.benchmarks`, reasoning-gym families never trained on):
    sparserl ood-tasks                      # the held-out OOD problems, checked against the tokenizer
    sparserl ood-eval --threads 1           # start policy + each Table 2 run's final/ -> ood/ood.parquet
Paper scale (`ood.lm_eval`, `ood.evalplus`; cluster only, lm-eval and evalplus on vLLM):
    sparserl ood-harness --tool lm_eval --policy grpo_g8/seed0            # one checkpoint, one harness
    sparserl ood-harness --tool evalplus --dataset mbpp --policy start --dry-run   # print its argv
    sparserl ood-table                      # every harness JSON -> ood/ood.parquet
"""
from __future__ import annotations


def _cfg(args):
    from sparserl.core.config import load_config
    return load_config(args.config)


def checkpoint(cfg: dict, label: str) -> str:
    """The model a policy label evaluates: the RL start policy (a checkpoint dir, or its hub name at
    paper scale) or the run's `final/` (its owner's run when the method repeats another's spec)."""
    from sparserl.core.paths import Paths
    from sparserl.evaluation.ood import START, parse_label
    from sparserl.methods.spec import method_run
    method, seed = parse_label(label)
    if method == START:
        return str(Paths(cfg).policy(cfg["rl"]["policy"]))
    return str(method_run(cfg, method, seed).final)


def cmd_tasks(args):
    from sparserl.evaluation.ood import write_ood_tasks
    write_ood_tasks(_cfg(args))


def cmd_eval(args):
    from sparserl.evaluation.ood import evaluate_ood, policies
    cfg = _cfg(args)
    evaluate_ood(cfg, [(label, m, s, checkpoint(cfg, label)) for label, m, s in policies(cfg)],
                 threads=args.threads)


def cmd_harness(args):
    import shlex

    from sparserl.evaluation.ood import run_harness
    cfg = _cfg(args)
    if args.tool == "evalplus" and not args.dataset:
        raise SystemExit("ood-harness --tool evalplus: give --dataset (humaneval or mbpp)")
    out = run_harness(cfg, args.policy, args.tool, checkpoint(cfg, args.policy), dataset=args.dataset,
                      dry_run=args.dry_run)
    print(shlex.join(out) if args.dry_run else out)


def cmd_table(args):
    from sparserl.evaluation.ood import harness_table, policies
    cfg = _cfg(args)
    harness_table(cfg, {label: checkpoint(cfg, label) for label, _, _ in policies(cfg)})


def register(sub, add) -> None:
    add("ood-tasks", cmd_tasks, "BASIS Table 2 (tiny/small): held-out reasoning-gym families the policies never trained on")
    add("ood-eval", cmd_eval, "BASIS Table 2 (tiny/small): the start policy and each Table 2 run on the OOD families",
        threads=True)
    p = add("ood-harness", cmd_harness, "BASIS Table 2 (paper): lm-evaluation-harness or evalplus on one checkpoint "
            "(cluster only)")
    p.add_argument("--tool", required=True, choices=["lm_eval", "evalplus"])
    p.add_argument("--policy", required=True, help="'start' or '<method>/seed<n>'")
    p.add_argument("--dataset", choices=["humaneval", "mbpp"], help="evalplus: the dataset")
    p.add_argument("--dry-run", action="store_true", help="print the harness's command line, run nothing")
    add("ood-table", cmd_table, "BASIS Table 2 (paper): every harness result parsed into one table")
