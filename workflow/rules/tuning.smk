# Stage: learning rates and steps chosen per batch setting on the validation split (rl.lr_tuning;
# sparserl.engines.lr_tuning). Each setting (family, prompts and rollouts a step, steps: setting_of)
# trains its first method of rl.methods at every rate of rl.lr_tuning.grid and seed for the steps
# its runs train, scored at rl.lr_tuning.checkpoints on tasks/validation.parquet (pool side, no
# benchmark, pool or corpus problem); the rule validation_argmax writes tuning/lr.parquet (lr.csv,
# lr.md) and tuning/lr.json, which every rl_train job then reads. Off, or reading another tree's
# choice (rl.lr_tuning.from, configs/overlays/start1.yaml): no job here.
#   snakemake --cores 2 results/small/tuning/lr.parquet --configfile configs/small.yaml

LR_TUNING = None
if CFG.get("rl"):
    from sparserl.engines import lr_tuning as _lrt

    try:
        LR_TUNING = _lrt.check(CFG)
    except ConfigError as e:
        _files = ", ".join(map(str, workflow.overwrite_configfiles or workflow.configfiles))
        raise WorkflowError(f"config error: {_files}: {e}")


if LR_TUNING and not _lrt.borrowed(CFG):
    LR_SETTINGS = _lrt.setting_methods(CFG)  # setting -> its methods; the first trains its tuning

    @functools.lru_cache(maxsize=None)
    def _lr_tune_run(setting, lr, seed):
        rate = _lrt.grid_lr(CFG, lr)
        return _lrt.tuning_run(CFG, setting, rate, seed, _lrt.tuning_dir(P, setting, rate, seed))

    def lr_tune_run_of(w):
        """The tuning run of a job's wildcards (setting, lr, seed): engines.lr_tuning.tuning_run."""
        return _lr_tune_run(w.setting, w.lr, str(w.seed))

    def lr_tune_key(w):
        """The setting's runs (all each one's Run.key holds) and their scoring: engines.lr_tuning.rule_identity."""
        from sparserl.core.config import settings_key
        return settings_key(_lrt.rule_identity(CFG, w.setting), KEYS_DIR)

    def lr_tune_inputs(w):
        """A tuning run reads what the run reads (Run.inputs), the split, and what the split is
        checked against (engines.lr_tuning.guard_validation): the pool, the corpus, the benchmarks."""
        return {"run": list(lr_tune_run_of(w).inputs), "validation": str(P.validation_split()),
                "pool": str(P.train_pool()), "corpus": str(P.pretrain_corpus()),
                "benchmarks": [str(P.benchmark(b)) for b in BENCHMARKS]}

    rule make_validation:
        input:
            pool=str(P.train_pool()),
            corpus=str(P.pretrain_corpus()),
            benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
        output:
            str(P.validation_split()),
        params:
            key=cfg_key("tasks", "seed") + "-" + str(LR_TUNING["validation_size"]),
        log:
            str(P.stage("logs", "make_validation.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} make-validation --config {CONFIGS} --pool {input.pool} --corpus {input.corpus} "
            "--benchmarks {input.benchmarks} --out {output} > {log} 2>&1"

    rule lr_tune_run:
        input:
            unpack(lr_tune_inputs),
        output:
            str(P.tuning("{setting}", "lr{lr}", "seed{seed}", "validation.parquet")),
        wildcard_constraints:
            setting="[A-Za-z0-9_]+",
            lr="[0-9.e+-]+",
            seed="[0-9]+",
        params:
            key=lr_tune_key,
        log:
            str(P.stage("logs", "lr_tune_{setting}_lr{lr}_seed{seed}.log")),
        threads: T("rl")
        resources:
            **R("rl"),
        shell:
            "{SPARSERL} lr-tune-run --config {CONFIGS} --setting {wildcards.setting} "
            "--lr {wildcards.lr} --seed {wildcards.seed} --validation {input.validation} --pool {input.pool} "
            "--corpus {input.corpus} --benchmarks {input.benchmarks} --out {output} --threads {threads} > {log} 2>&1"

    rule lr_tuning:
        input:
            tables=[str(_lrt.validation_table(P, st, lr, s))
                    for st in LR_SETTINGS for lr in LR_TUNING["grid"] for s in LR_TUNING["seeds"]],
            validation=str(P.validation_split()),
        output:
            table=str(P.tuning("lr.parquet")),
            csv=str(P.tuning("lr.csv")),
            markdown=str(P.tuning("lr.md")),
            chosen=str(P.tuning("lr.json")),
        log:
            str(P.stage("logs", "lr_tuning.log")),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} lr-tune-select --config {CONFIGS} --tables {input.tables} --validation {input.validation} "
            "--out-table {output.table} --out-csv {output.csv} --out-md {output.markdown} --out-json {output.chosen} "
            "> {log} 2>&1"
