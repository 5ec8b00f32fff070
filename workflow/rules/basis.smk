# Stage: BASIS reference-rollout caching and Monte Carlo oracle values.
# Each cache is one parquet (prompt_id, n, successes, phat, rewards, lengths); inspect it with
# `python -m sparserl show <path>`. Snakemake rebuilds it only when its policy or pool changes.

from sparserl.core.config import setting

BASIS = CFG.get("basis", {})
# The cache's prompts split over `basis.reference_shards` jobs (paper: 32; the arithmetic is in
# sparserl.engines.sizing): job k rolls out the mc-values shards si with si % K == k under the
# same seeds, and reference_cache joins them. One shard (tiny, small): one job, as before.
REF_SHARDS = int(setting(CFG, "basis", "reference_shards"))

if REF_SHARDS > 1:

    rule reference_cache_shard:
        input:
            policy=lambda w: policy_input(w.policy),
            pool=str(P.train_pool()),
        output:
            str(P.reference_cache_shard("{policy}", "{shard}", REF_SHARDS)),
        wildcard_constraints:
            policy="[^/]+",
            shard="[0-9]+",
        params:
            n=setting(CFG, "basis", "reference_n"),
        log:
            str(P.stage("logs", "reference_cache_{policy}_{shard}.log")),
        threads: T("rollout")
        priority: 10
        resources:
            **R("rollout"),
        shell:
            "{SPARSERL} mc-values --config {CONFIGS} --policy {wildcards.policy} --n {params.n} "
            "--policy-dir {input.policy} --pool {input.pool} "
            "--shard {wildcards.shard} --shards %d --out {output} --threads {threads} > {log} 2>&1" % REF_SHARDS

    rule reference_cache:
        input:
            parts=[str(P.reference_cache_shard("{policy}", k, REF_SHARDS)) for k in range(REF_SHARDS)],
            pool=str(P.train_pool()),
        output:
            str(P.reference_cache("{policy}")),
        wildcard_constraints:
            policy="[^/]+",
        params:
            n=setting(CFG, "basis", "reference_n"),
        log:
            str(P.stage("logs", "reference_cache_{policy}.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} mc-values-merge --config {CONFIGS} --policy {wildcards.policy} --n {params.n} "
            "--pool {input.pool} --out {output} {input.parts} > {log} 2>&1"

else:

    rule reference_cache:
        input:
            policy=lambda w: policy_input(w.policy),
            pool=str(P.train_pool()),
        output:
            str(P.reference_cache("{policy}")),
        wildcard_constraints:
            policy="[^/]+",
        params:
            n=setting(CFG, "basis", "reference_n"),
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
            "--policy-dir {input.policy} --pool {input.pool} "
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
        n=setting(CFG, "basis", "oracle_n"),
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
        "--policy-dir {input.policy} --pool {input.pool} "
        "--out {output} --threads {threads} --seed-offset 1000003 > {log} 2>&1"

# The BASIS value study on RL checkpoints (basis.study_checkpoints, sparserl.studies.basis_checkpoints):
# the oracle of each early / middle / late checkpoint of one RL run, on the study's fixed prompts.
# The run writes its intermediate checkpoints before `final/`, its declared output.
from sparserl.studies.basis_checkpoints import study_checkpoints

STUDY_CKPTS = study_checkpoints(P)

if STUDY_CKPTS:

    rule checkpoint_oracle:
        input:
            final=str(STUDY_CKPTS[-1].run_dir / "final"),
            pool=str(P.train_pool()),
        output:
            str(P.checkpoint_oracle(STUDY_CKPTS[0].method, STUDY_CKPTS[0].seed, "{label}")),
        wildcard_constraints:
            label="|".join(c.label for c in STUDY_CKPTS),
        params:
            n=setting(CFG, "basis", "oracle_n"),
        log:
            str(P.stage("logs", "checkpoint_oracle_{label}.log")),
        threads: T("rollout")
        priority: 10
        resources:
            **R("rollout"),
        shell:
            "{SPARSERL} study-checkpoint-oracle --config {CONFIGS} --checkpoint {wildcards.label} "
            "--pool {input.pool} --n {params.n} --out {output} --threads {threads} > {log} 2>&1"
