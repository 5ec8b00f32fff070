# Stage: tiny policies (tokenizer + pre-training) and their pass rates on the training pool.

PRETRAINED = P.pretrained_policies()

if PRETRAINED:

    rule train_tokenizer:
        input:
            corpus=str(P.pretrain_corpus()),
        output:
            tokenizer=directory(str(P.tokenizer())),
        log:
            str(P.stage("logs", "train_tokenizer.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} train-tokenizer --config {CONFIGS} --corpus {input.corpus} --out {output.tokenizer} > {log} 2>&1"

    rule pretrain_policy:
        # wildcard `name`, not `policy`: Snakemake first tries a consumer's own wildcards on a
        # producer with the same wildcard name and checks constraints with re.match (a prefix),
        # so `policy=s@p50` would pass "s|m|l" and clash with the snapshot output
        input:
            corpus=str(P.pretrain_corpus()),
            tokenizer=str(P.tokenizer()),
        output:
            policy=directory(str(P.stage("policies", "{name}"))),
            snapshots=[directory(str(P.stage("policies", "{name}@" + tag)))
                       for tag in P.snapshot_tags()],
        wildcard_constraints:
            name="|".join(PRETRAINED),
        params:
            key=lambda w: cfg_key("pretrain", "tokenizer") + str(CFG["policies"][w.name]),
        log:
            str(P.stage("logs", "pretrain_{name}.log")),
        # the root of the DAG's longest chain (pre-training -> V0's harvest and tables -> v05_osla_v0)
        priority: 20
        threads: T("pretrain")
        resources:
            **R("pretrain"),
        shell:
            "{SPARSERL} pretrain --config {CONFIGS} --policy {wildcards.name} --corpus {input.corpus} "
            "--tokenizer {input.tokenizer} --out {output.policy} --snapshots {output.snapshots} "
            "--threads {threads} > {log} 2>&1"

    rule passrate:
        input:
            policy=str(P.stage("policies", "{policy}")),
            pool=str(P.train_pool()),
            # the RL start policy's pass rates are read off its reference cache (same pool,
            # same sampling, more samples) instead of rolling the pool out again
            shared=lambda w: [str(c) for c in [P.passrate_cache(w.policy)] if c is not None],
        output:
            passrate=str(P.passrate("{policy}")),
        wildcard_constraints:
            policy="[^/]+",
        params:
            key=cfg_key("passrate", "rollout"),
        log:
            str(P.stage("logs", "passrate_{policy}.log")),
        threads: T("rollout")
        resources:
            **R("rollout"),
        shell:
            "{SPARSERL} passrate --config {CONFIGS} --policy {wildcards.policy} --policy-dir {input.policy} "
            "--pool {input.pool} --cache {input.shared} --out {output.passrate} --threads {threads} > {log} 2>&1"

    rule world_report:
        # greedy vs sampled accuracy of the RL start policy on the pool and every benchmark: the
        # room RL's sharpening has (sparserl.evaluation.world)
        input:
            policies=lambda w: [str(P.policy(r)) for r in P.world_policies()],
            pool=str(P.train_pool()),
            benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
            corpus=str(P.pretrain_corpus()),
            tokenizer=str(P.tokenizer()),
        output:
            report=str(P.world_report()),
        params:
            key=cfg_key("world", "evaluation", "rollout"),
            labels=" ".join(P.world_policies()),
        log:
            str(P.stage("logs", "world_report.log")),
        threads: T("rollout")
        resources:
            **R("rollout"),
        shell:
            "{SPARSERL} world-report --config {CONFIGS} --policies {input.policies} --labels {params.labels} "
            "--pool {input.pool} "
            "--benchmarks {input.benchmarks} --corpus {input.corpus} --tokenizer {input.tokenizer} "
            "--out {output.report} --threads {threads} > {log} 2>&1"

    rule passrate_summary:
        input:
            passrates=[str(P.passrate(n)) for n in PRETRAINED],
        output:
            summary=str(P.passrates()),
        log:
            str(P.stage("logs", "passrate_summary.log")),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} passrate-summary --config {CONFIGS} --passrates {input.passrates} "
            "--out {output.summary} > {log} 2>&1"
