# Stage: BASIS reference-rollout caching and Monte Carlo oracle values.
# Each cache is one parquet (prompt_id, n, successes, phat, rewards, lengths); inspect it with
# `python -m sparserl show <path>`. Snakemake rebuilds it only when its policy or pool changes.

BASIS = CFG.get("basis", {})

rule reference_cache:
    input:
        policy=lambda w: policy_input(w.policy),
        pool=str(P.train_pool()),
    output:
        str(P.reference_cache("{policy}")),
    wildcard_constraints:
        policy="[^/]+",
    params:
        n=BASIS.get("reference_n", 64),
    log:
        str(P.stage("logs", "reference_cache_{policy}.log")),
    threads: T("rollout")
    # long jobs that the studies and their figures wait on: started first, the short RL jobs fill
    # the cores around them instead of the DAG's tail waiting on one of them
    priority: 10
    resources:
        **R("rollout"),
    shell:
        "{SPARSERL} mc-values --config {CONFIGS} --policy {wildcards.policy} --n {params.n} "
        "--out {output} --threads {threads} > {log} 2>&1"

rule oracle_values:
    input:
        policy=lambda w: policy_input(w.policy),
        pool=str(P.train_pool()),
    output:
        str(P.oracle("{policy}")),
    wildcard_constraints:
        policy="[^/]+",
    params:
        n=BASIS.get("oracle_n", 256),
    log:
        str(P.stage("logs", "oracle_values_{policy}.log")),
    threads: T("rollout")
    # long jobs that the studies and their figures wait on: started first, the short RL jobs fill
    # the cores around them instead of the DAG's tail waiting on one of them
    priority: 10
    resources:
        **R("rollout"),
    shell:
        "{SPARSERL} mc-values --config {CONFIGS} --policy {wildcards.policy} --n {params.n} "
        "--out {output} --threads {threads} --seed-offset 1000003 > {log} 2>&1"
