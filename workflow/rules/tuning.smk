# Stage: learning rates tuned per method family (rl.lr_tuning; sparserl.engines.lr_tuning). Each
# family's representative trains rl.lr_tuning.steps steps at factor x rl.lr for every grid factor and
# seed, scored on a validation split of the pool's side (tasks/validation.parquet); the best factor
# per family goes to tuning/lr.json, which every rl_train job then reads. Off: no job here.
#   snakemake --cores 2 results/small/tuning/lr.parquet --configfile configs/small.yaml

LR_TUNING = None
if CFG.get("rl"):
    from sparserl.engines import lr_tuning as _lrt

    try:
        LR_TUNING = _lrt.check(CFG)
    except ConfigError as e:
        _files = ", ".join(map(str, workflow.overwrite_configfiles or workflow.configfiles))
        raise WorkflowError(f"config error: {_files}: {e}")


def lr_tuning_inputs(wildcards=None):
    """The tuned rates an RL run reads (rule rl_train's input), when rl.lr_tuning is enabled."""
    return [str(P.tuning("lr.json"))] if LR_TUNING else []


if LR_TUNING:
    from types import SimpleNamespace

    def lr_tune_inputs(w):
        """A tuning run reads what its representative's RL run reads (rl_inputs), and the split."""
        return rl_inputs(SimpleNamespace(method=LR_TUNING["families"][w.family])) + [str(P.validation_split())]

    def lr_tune_key(w):
        from sparserl.core.config import settings_key
        from sparserl.methods.spec import load_method
        spec = load_method(LR_TUNING["families"][w.family])
        return settings_key({"rl": _lrt.run_settings(CFG, spec), "rollout": CFG["rollout"],
                             "evaluation": CFG["evaluation"], "method": spec.to_dict()}, KEYS_DIR)

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
            "{SPARSERL} make-validation --config {CONFIGS} > {log} 2>&1"

    rule lr_tune_run:
        input:
            lr_tune_inputs,
        output:
            str(P.tuning("{family}", "x{factor}", "seed{seed}", "validation.parquet")),
        wildcard_constraints:
            family="[A-Za-z0-9_]+",
            factor="[0-9.]+",
            seed="[0-9]+",
        params:
            key=lr_tune_key,
        log:
            str(P.stage("logs", "lr_tune_{family}_x{factor}_seed{seed}.log")),
        threads: T("rl")
        resources:
            **R("rl"),
        shell:
            "{SPARSERL} lr-tune-run --config {CONFIGS} --family {wildcards.family} "
            "--factor {wildcards.factor} --seed {wildcards.seed} --threads {threads} > {log} 2>&1"

    rule lr_tuning:
        input:
            [str(P.tuning(fam, f"x{_lrt.factor_label(f)}", f"seed{s}", "validation.parquet"))
             for fam in LR_TUNING["families"] for f in LR_TUNING["grid"] for s in LR_TUNING["seeds"]],
        output:
            table=str(P.tuning("lr.parquet")),
            chosen=str(P.tuning("lr.json")),
        log:
            str(P.stage("logs", "lr_tuning.log")),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} lr-tune-select --config {CONFIGS} > {log} 2>&1"
