# Stage: value models. V0 on the V0 paper's released sample: a target of its own, outside `all`
# (the sample is local data that CI and a fresh clone lack):
#   snakemake --cores 2 v0_official --configfile configs/tiny.yaml configs/overlays/v0_sample.yaml

V0_SAMPLE = (CFG.get("v0") or {}).get("official_sample")


def v0_sample_input(w):
    if not V0_SAMPLE:
        raise WorkflowError("v0_official needs v0.official_sample: the folder of the V0 paper's "
                            "released sample; layer configs/overlays/v0_sample.yaml on the scale config "
                            "(--configfile configs/tiny.yaml configs/overlays/v0_sample.yaml)")
    if not os.path.isdir(V0_SAMPLE):
        raise WorkflowError(f"v0.official_sample {V0_SAMPLE} is not a folder; the sample is local "
                            "data (../shared/data/v0_official_sample on our machines)")
    return [os.path.join(V0_SAMPLE, f) for f in
            ("context.jsonl", "train.jsonl", "test.jsonl", "validity.jsonl", "prompt_dict.json")]


rule v0_official:
    input:
        v0_sample_input,
    output:
        metrics=str(P.v0_official("metrics.parquet")),
        predictions=str(P.v0_official("predictions.parquet")),
    params:
        key=cfg_key("v0"),
        # the sample's folder (its files are the input) and the outputs' (run_official writes
        # embeddings and models beside the tables)
        sample=lambda w, input: os.path.dirname(input[0]),
        out=lambda w, output: os.path.dirname(output.metrics),
    log:
        str(P.stage("logs", "v0_official.log")),
    threads: T("cpu_small", 2)
    resources:
        **R("cpu_small"),
    shell:
        "{SPARSERL} v0-official --config {CONFIGS} --sample {params.sample:q} --out {params.out:q} "
        "--threads {threads} > {log} 2>&1"


from sparserl.values.v0.settings import v0_settings

# Paper-scale resources of the V0 rules: groups v0_embed, v0_train, v0_ablations (one GPU each: the
# embedder and V0 run on it, v0.device auto) and v0_cpu (routing), sized from the work in
# sparserl.engines.sizing (the arithmetic, also in docs/cluster.md); tiny/small have no
# resources section and run everything on the local cores.

# the RL pool under V0's embedder, once for every run and study with V0's prior (values.v0.prior)
_V0_EMBEDDER = v0_settings(CFG)["embedder"]
V0_EMBEDDER = _V0_EMBEDDER["kind"]
V0_POOL_EMBEDDINGS = str(P.v0_pool_embeddings(V0_EMBEDDER))
# an embedder of kind policy reads a pre-trained policy's folder: an input of both embedding rules
V0_EMBEDDER_POLICY = [str(P.policy(_V0_EMBEDDER["path"]))] if V0_EMBEDDER == "policy" else []
V0_EMBEDDER_FLAG = "".join(f" --embedder-policy {p}" for p in V0_EMBEDDER_POLICY)


rule v0_pool_embeddings:
    input:
        pool=str(P.train_pool()),
        embedder=model_inputs("v0.embedder"),
        embedder_policy=V0_EMBEDDER_POLICY,
    output:
        embeddings=V0_POOL_EMBEDDINGS,
    params:
        key=cfg_key("v0"),
    priority: 5
    log:
        str(P.stage("logs", "v0_pool_embeddings.log")),
    threads: T("v0_embed", 1)
    resources:
        # paper: ~17.4k DAPO prompts x <= 1024 tokens through the 0.6B embedder, ~20 min on a GPU;
        # 36 GB of float16 states, twice while assembled (sizing.v0_rule_estimates)
        **R("v0_embed"),
    shell:
        "{SPARSERL} v0-embed --config {CONFIGS} --pool {input.pool} --out {output.embeddings} "
        "--threads {threads}" + V0_EMBEDDER_FLAG + " > {log} 2>&1"


# V0's trajectory harvest (sparserl.engines.harvest): per policy a GRPO run with a checkpoint every
# v0.harvest.checkpoint_samples samples, avg@k of each checkpoint on the held-out benchmarks, and
# the run's on-policy rollouts, in one long table (`sparserl show results/<scale>/values/harvest.parquet`).
V0_HARVEST = (CFG.get("v0") or {}).get("harvest")

if V0_HARVEST is not None:
    from sparserl.engines.harvest import harvest_settings

    V0_POLICIES = harvest_settings(CFG)["policies"]

    @functools.lru_cache(maxsize=None)
    def v0_harvest_run_of(policy):
        """Policy's harvest run (engines.harvest_settings.harvest_run: methods.run.resolve_run)."""
        from sparserl.engines.harvest_settings import harvest_run
        return harvest_run(CFG, policy, P.harvest_run(policy))

    rule v0_harvest_run:
        input:
            # the policy it starts from, the pool (and what else its method reads)
            lambda w: list(v0_harvest_run_of(w.policy).inputs),
        output:
            final=directory(str(P.harvest_run("{policy}") / "final")),
            rollouts=str(P.harvest_run("{policy}") / "rollouts.parquet"),
        wildcard_constraints:
            policy="[^/@]+",
        params:
            key=lambda w: run_key(v0_harvest_run_of(w.policy)),
        # the DAG's longest chain: run when ready, the critique runs fill the cores around it
        priority: 5
        log:
            str(P.stage("logs", "v0_harvest_run_{policy}.log")),
        threads: T("rl")
        resources:
            **SIZED("rl", "v0_harvest_run"),
        shell:
            "{SPARSERL} v0-harvest-run --config {CONFIGS} --policy {wildcards.policy} --out {output.final} "
            "--rollouts {output.rollouts} --threads {threads} > {log} 2>&1"

    import re

    from sparserl.engines.harvest import harvest_shard_path

    V0_SHARDS = harvest_settings(CFG)["shards"]
    V0_POLICY_RE = "|".join(re.escape(p) for p in V0_POLICIES)

    def v0_harvest_values_input(w):
        return dict(policy=policy_input(w.policy), final=str(P.harvest_run(w.policy) / "final"),
                    rollouts=str(P.harvest_run(w.policy) / "rollouts.parquet"), pool=str(P.train_pool()),
                    benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS])

    if V0_SHARDS == 1:
        rule v0_harvest_values:
            input:
                unpack(v0_harvest_values_input),
            output:
                harvest=str(P.harvest("{policy}")),
            wildcard_constraints:
                policy=V0_POLICY_RE,
            params:
                key=cfg_key("v0", "evaluation", "rollout"),
            priority: 5
            log:
                str(P.stage("logs", "v0_harvest_values_{policy}.log")),
            threads: T("rollout")
            resources:
                **R("rollout"),
            shell:
                "{SPARSERL} v0-harvest-values --config {CONFIGS} --policy {wildcards.policy} "
                "--policy-dir {input.policy} --final {input.final} --rollouts {input.rollouts} --pool {input.pool} "
                "--benchmarks {input.benchmarks} --out {output.harvest} --threads {threads} > {log} 2>&1"
    else:
        # v0.harvest.shards jobs per policy, each avg@k of checkpoints shard, shard + N, ...
        # (paper: one checkpoint a job; sparserl.engines.sizing sizes them)
        rule v0_harvest_values_shard:
            input:
                unpack(v0_harvest_values_input),
            output:
                shard=harvest_shard_path(P.harvest("{policy}"), "{shard}", V0_SHARDS),
            wildcard_constraints:
                policy=V0_POLICY_RE,
                shard=r"\d+",
            params:
                key=cfg_key("v0", "evaluation", "rollout"),
            priority: 5
            log:
                str(P.stage("logs", "v0_harvest_values_{policy}_shard{shard}.log")),
            threads: T("rollout")
            resources:
                **R("rollout"),
            shell:
                "{SPARSERL} v0-harvest-shard --config {CONFIGS} --policy {wildcards.policy} "
                "--shard {wildcards.shard} --policy-dir {input.policy} --final {input.final} "
                "--benchmarks {input.benchmarks} --out {output.shard} --threads {threads} > {log} 2>&1"

        rule v0_harvest_merge:
            # the table v0_harvest_values writes in one job: the shards' rows plus the on-policy rows
            input:
                shards=lambda w: [harvest_shard_path(P.harvest(w.policy), i, V0_SHARDS)
                                  for i in range(V0_SHARDS)],
                rollouts=str(P.harvest_run("{policy}") / "rollouts.parquet"),
                pool=str(P.train_pool()),
            output:
                harvest=str(P.harvest("{policy}")),
            wildcard_constraints:
                policy=V0_POLICY_RE,
            params:
                key=cfg_key("v0", "evaluation", "rollout"),
            log:
                str(P.stage("logs", "v0_harvest_merge_{policy}.log")),
            resources:
                **R("cpu_small"),
            shell:
                "{SPARSERL} v0-harvest-merge --config {CONFIGS} --policy {wildcards.policy} --shards {input.shards} "
                "--rollouts {input.rollouts} --pool {input.pool} --out {output.harvest} > {log} 2>&1"

    rule v0_harvest:
        input:
            harvests=[str(P.harvest(p)) for p in V0_POLICIES],
        output:
            table=str(P.harvest_table()),
        log:
            str(P.stage("logs", "v0_harvest.log")),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} v0-harvest-all --config {CONFIGS} --harvests {input.harvests} --out {output.table} > {log} 2>&1"

    V0_EMBEDDINGS = str(P.v0_embeddings(V0_EMBEDDER))

    rule v0_embeddings:
        # the embedder over every harvest prompt, once: the table, ablation and routing jobs that
        # run side by side would each embed them again
        input:
            harvest=str(P.harvest_table()),
            embedder=model_inputs("v0.embedder"),
            embedder_policy=V0_EMBEDDER_POLICY,
        output:
            embeddings=V0_EMBEDDINGS,
        params:
            key=cfg_key("v0"),
        priority: 5
        log:
            str(P.stage("logs", "v0_embeddings.log")),
        threads: T("v0_embed", 1)
        resources:
            # paper: ~19k prompts (pool + 1,577 held-out) x <= 1024 tokens, ~22 min on a GPU;
            # 19k x 1024 x 1024 x 2 B = 37 GB of states, twice while assembled: ~126 GB
            **R("v0_embed"),
        shell:
            "{SPARSERL} v0-embed --config {CONFIGS} --harvest {input.harvest} --out {output.embeddings} "
            "--threads {threads}" + V0_EMBEDDER_FLAG + " > {log} 2>&1"

    rule v0_table:
        # Table 1 (sequential alignment) and Table 2 (strict generalisation): V0 and its baselines
        input:
            harvest=str(P.harvest_table()),
            embeddings=V0_EMBEDDINGS,
            head=model_inputs("v0.head"),
            # the level-only reference row reads each query's level (values/v0/references.py)
            pool=str(P.train_pool()),
            benchmarks=[str(P.benchmark(b)) for b in P.benchmark_names()],
            # the coupled value-model baselines train on each harvested policy
            policies=[str(P.policy(p)) for p in V0_POLICIES],
        output:
            table=str(P.value_eval("v0_{protocol}")),
            predictions=str(P.value_eval("v0_{protocol}_predictions")),
            model=str(P.value_model("v0") / "v0.{protocol}.seed0.pt"),  # the sequential one is the RL prior
        wildcard_constraints:
            protocol="sequential|strict",
        params:
            key=cfg_key("v0"),
            labels=" ".join(V0_POLICIES),
        priority: 5
        log:
            str(P.stage("logs", "v0_table_{protocol}.log")),
        # one thread unless the cluster says otherwise: a 2-thread job on 2 cores waits until both
        # are free, which the one-thread RL and critique jobs never leave (it ran 12 minutes late)
        threads: T("v0_train", 1)
        resources:
            # paper: 10 epochs x <= 475k train rows / 8 = 594k episodes x ~0.04 s on a GPU = 6.6 h;
            # the 37 GB table in host memory (copied to the GPU when it fits)
            **R("v0_train"),
        shell:
            "{SPARSERL} v0-table --config {CONFIGS} --protocol {wildcards.protocol} --seed 0 "
            "--harvest {input.harvest} --embeddings {input.embeddings} --pool {input.pool} "
            "--benchmarks {input.benchmarks} --policies {input.policies} --labels {params.labels} "
            "--out {output.table} --predictions {output.predictions} --model {output.model} "
            "--threads {threads} > {log} 2>&1"

    rule v0_ablations:
        # Table 6: connector variants, rank / CE / both losses, frozen vs tuned head (strict
        # protocol); the unchanged variant is Table 2's V0, read from its predictions
        input:
            harvest=str(P.harvest_table()),
            embeddings=V0_EMBEDDINGS,
            base=str(P.value_eval("v0_strict_predictions")),
            models=model_inputs("v0.head"),
        output:
            table=str(P.value_eval("v0_ablations")),
        params:
            key=cfg_key("v0"),
        priority: 5
        log:
            str(P.stage("logs", "v0_ablations.log")),
        threads: T("v0_ablations", 1)
        resources:
            # paper: five retrained variants of v0_table's training, 5 x 6.6 h
            **R("v0_ablations"),
        shell:
            "{SPARSERL} v0-ablations --config {CONFIGS} --protocol strict --seed 0 --harvest {input.harvest} "
            "--embeddings {input.embeddings} --base-predictions {input.base} --out {output.table} "
            "--threads {threads} > {log} 2>&1"

    rule v0_routing:
        # Figure 5 (right): the accuracy-cost frontier of routing across the policy fleet
        input:
            harvest=str(P.harvest_table()),
            embeddings=V0_EMBEDDINGS,
            predictions=str(P.value_eval("v0_strict_predictions")),
            # each policy's routing cost: its checkpoint's parameter count
            policies=[str(P.policy(p)) for p in V0_POLICIES],
        output:
            table=str(P.value_eval("v0_routing")),
        params:
            labels=" ".join(V0_POLICIES),
        priority: 5
        log:
            str(P.stage("logs", "v0_routing.log")),
        resources:
            # no GPU: mean-pools the 37 GB table and fits a small matrix factorisation
            **R("v0_cpu"),
        shell:
            "{SPARSERL} v0-routing --config {CONFIGS} --harvest {input.harvest} --embeddings {input.embeddings} "
            "--predictions {input.predictions} --policies {input.policies} --labels {params.labels} "
            "--out {output.table} > {log} 2>&1"

    def v0_targets():
        return [str(P.value_eval(f"v0_{p}")) for p in ("sequential", "strict")] + \
            [str(P.value_eval("v0_ablations")), str(P.value_eval("v0_routing"))]
