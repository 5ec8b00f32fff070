"""`python -m sparserl ood-*`: BASIS Table 2's out-of-domain evaluation (workflow/rules/ood.smk).
Each command reads and writes the paths it is given (the DAG resolves them).

Tiny and small scale (`ood.benchmarks`, reasoning-gym families never trained on):
    R=results/tiny
    sparserl ood-tasks --tokenizer $R/tokenizer --corpus $R/tasks/pretrain_corpus.parquet \
        --benchmarks $R/tasks/benchmarks/*.parquet --out $R/ood/tasks/products_3x1digit.parquet ...
    sparserl ood-eval --tasks $R/ood/tasks/*.parquet --policies start=$R/policies/s \
        grpo_g8/seed0=$R/rl/grpo_g8/seed0/final ... --out $R/ood/ood.parquet --threads 1
Paper scale (`ood.lm_eval`, `ood.evalplus`; cluster only, lm-eval and evalplus on vLLM):
    sparserl ood-harness --tool lm_eval --policy grpo_g8/seed0 --checkpoint results/paper/rl/grpo_g8/seed0/final \
        --out results/paper/ood/harness/grpo_g8/seed0/lm_eval.json          # one checkpoint, one harness
    sparserl ood-harness ... --dry-run      # print its argv
    sparserl ood-table --harness <every harness JSON> --policies start=... --out results/paper/ood/ood.parquet
"""
from __future__ import annotations


def _cfg(args):
    from sparserl.core.config import load_config
    return load_config(args.config)


def _checkpoints(cfg: dict, items: list[str]) -> list[tuple[str, str, int | None, str]]:
    """`--policies label=checkpoint ...` as (label, method, seed, checkpoint), one per policy of the
    config (`evaluation.ood.policies`, in that order): the start policy (a checkpoint dir, or the
    hub model's local copy) and each run's `final/` (its owner's run when a method repeats
    another's spec), as the DAG resolved them."""
    from sparserl.evaluation.ood import policies
    given = dict(item.split("=", 1) for item in items if "=" in item)
    bad = [item for item in items if "=" not in item]
    want = [(label, m, s) for label, m, s in policies(cfg)]
    if bad or sorted(given) != sorted(label for label, _, _ in want):
        raise SystemExit(f"--policies: give label=checkpoint for exactly the config's OOD policies "
                         f"{[label for label, _, _ in want]}; got {items}")
    return [(label, m, s, given[label]) for label, m, s in want]


def cmd_tasks(args):
    from sparserl.evaluation.ood import write_ood_tasks
    write_ood_tasks(_cfg(args), args.tokenizer, args.corpus, args.benchmarks, args.out)


def cmd_eval(args):
    from sparserl.evaluation.ood import evaluate_ood
    cfg = _cfg(args)
    evaluate_ood(cfg, _checkpoints(cfg, args.policies), args.tasks, args.out, threads=args.threads)


def cmd_harness(args):
    import shlex

    from sparserl.evaluation.ood import run_harness
    cfg = _cfg(args)
    if args.tool == "evalplus" and not args.dataset:
        raise SystemExit("ood-harness --tool evalplus: give --dataset (humaneval or mbpp)")
    out = run_harness(cfg, args.policy, args.tool, args.checkpoint, args.out, dataset=args.dataset,
                      dry_run=args.dry_run)
    print(shlex.join(out) if args.dry_run else out)


def cmd_table(args):
    from sparserl.evaluation.ood import harness_table
    cfg = _cfg(args)
    harness_table(cfg, args.harness, args.out, {label: ck for label, _, _, ck in _checkpoints(cfg, args.policies)})


def register(sub, add) -> None:
    p = add("ood-tasks", cmd_tasks, "BASIS Table 2 (tiny/small): held-out reasoning-gym families the policies never "
            "trained on")
    p.add_argument("--tokenizer", required=True, help="the world's tokenizer folder")
    p.add_argument("--corpus", required=True, help="the world's pre-training corpus (.parquet)")
    p.add_argument("--benchmarks", nargs="*", default=[], help="the in-domain benchmark tables (no OOD problem is one)")
    p.add_argument("--out", nargs="+", required=True, help="one <family>.parquet per ood.benchmarks family")
    p = add("ood-eval", cmd_eval, "BASIS Table 2 (tiny/small): the start policy and each Table 2 run on the OOD "
            "families", threads=True)
    p.add_argument("--tasks", nargs="+", required=True, help="the OOD task tables (ood-tasks' outputs)")
    p.add_argument("--policies", nargs="+", required=True, metavar="LABEL=CHECKPOINT",
                   help="each OOD policy's checkpoint: start=<policy dir> <method>/seed<n>=<run>/final ...")
    p.add_argument("--out", required=True, help="the OOD table to write (ood.parquet)")
    p = add("ood-harness", cmd_harness, "BASIS Table 2 (paper): lm-evaluation-harness or evalplus on one checkpoint "
            "(cluster only)")
    p.add_argument("--tool", required=True, choices=["lm_eval", "evalplus"])
    p.add_argument("--policy", required=True, help="'start' or '<method>/seed<n>'")
    p.add_argument("--dataset", choices=["humaneval", "mbpp"], help="evalplus: the dataset")
    p.add_argument("--checkpoint", required=True, help="the checkpoint dir (or hub model's local copy) to evaluate")
    p.add_argument("--out", required=True, help="the harness JSON to write")
    p.add_argument("--dry-run", action="store_true", help="print the harness's command line, run nothing")
    p = add("ood-table", cmd_table, "BASIS Table 2 (paper): every harness result parsed into one table")
    p.add_argument("--harness", nargs="+", required=True, help="every harness JSON, in harness_outputs order")
    p.add_argument("--policies", nargs="+", required=True, metavar="LABEL=CHECKPOINT",
                   help="each OOD policy's checkpoint (the table's checkpoint column)")
    p.add_argument("--out", required=True, help="the OOD table to write (ood.parquet)")
