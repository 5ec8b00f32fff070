# Stage: benchmark evaluation (mean@k / avg@k / greedy per benchmark, from the config).

EVAL_POLICIES = CFG["evaluation"].get("policies", list(CFG["policies"]))

rule evaluate:
    input:
        policy=lambda w: policy_input(w.policy),
        benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
    output:
        str(P.eval_table("{policy}")),
    wildcard_constraints:
        policy="[^/]+",
    params:
        key=cfg_key("evaluation", "rollout"),
    log:
        str(P.stage("logs", "evaluate_{policy}.log")),
    threads: T("rollout")
    resources:
        **R("rollout"),
    shell:
        "{SPARSERL} evaluate --config {CONFIGS} --policy {wildcards.policy} "
        "--threads {threads} > {log} 2>&1"

rule eval_summary:
    input:
        [str(P.eval_table(r)) for r in EVAL_POLICIES],
    output:
        str(P.eval_summary()),
    localrule: True
    resources:
        **R("cpu_small"),
    shell:
        "{SPARSERL} eval-summary --config {CONFIGS}"
