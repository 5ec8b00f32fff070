# Stage: benchmark evaluation (mean@k / avg@k / greedy per benchmark, from the config).

EVAL_POLICIES = CFG["evaluation"].get("policies", list(CFG["policies"]))

rule evaluate:
    input:
        policy=lambda w: policy_input(w.policy),
        benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
    output:
        table=str(P.eval_table("{policy}")),
        # its unbiased pass@k curve; the start policy (rl.policy) draws evaluation.start_k samples
        curve=str(P.pass_at_k_curve("{policy}")),
    wildcard_constraints:
        policy="[^/]+",
    params:
        key=cfg_key("evaluation", "rollout"),
    log:
        str(P.stage("logs", "evaluate_{policy}.log")),
    threads: T("rollout")
    resources:
        # paper: the runtime from each job's estimate (the start policy draws evaluation.start_k)
        **SIZED("rollout", "evaluate"),
    shell:
        "{SPARSERL} evaluate --config {CONFIGS} --policy {wildcards.policy} --policy-dir {input.policy} "
        "--benchmarks {input.benchmarks} --out {output.table} --curve {output.curve} "
        "--threads {threads} > {log} 2>&1"

rule eval_summary:
    input:
        evals=[str(P.eval_table(r)) for r in EVAL_POLICIES],
    output:
        summary=str(P.eval_summary()),
    log:
        str(P.stage("logs", "eval_summary.log")),
    localrule: True
    resources:
        **R("cpu_small"),
    shell:
        "{SPARSERL} eval-summary --config {CONFIGS} --evals {input.evals} --out {output.summary} > {log} 2>&1"
