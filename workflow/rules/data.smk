# Stage: data preparation. Tiny: procedural tasks. Paper: hub datasets (or config local paths).

BENCHMARKS = P.benchmark_names()

if CFG["tasks"]["source"] == "procedural":

    rule make_tasks:
        output:
            pool=str(P.train_pool()),
            corpus=str(P.pretrain_corpus()),
            benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
        params:
            key=cfg_key("tasks", "seed"),
        log:
            str(P.stage("logs", "make_tasks.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} make-tasks --config {CONFIGS} --pool {output.pool} --corpus {output.corpus} "
            "--benchmarks {output.benchmarks} > {log} 2>&1"

else:

    rule fetch_data:
        # needs internet (the hub); point tasks.local_paths.<name> at local files to skip it
        output:
            pool=str(P.train_pool()),
            benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
        log:
            str(P.stage("logs", "fetch_data.log")),
        localrule: True
        resources:
            **R("download"),
        shell:
            # online although compute jobs run with HF_HUB_OFFLINE=1 (workflow/rules/models.smk)
            "HF_HUB_OFFLINE=0 {SPARSERL} fetch-data --config {CONFIGS} --pool {output.pool} "
            "--benchmarks {output.benchmarks} > {log} 2>&1"
