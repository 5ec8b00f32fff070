# Stage: BASIS Table 2, out-of-domain evaluation of the RL start policy and each Table 2 run's
# final checkpoint (sparserl.evaluation.ood), one table: results/{scale}/ood/ood.parquet.
#   tiny/small (ood.benchmarks): reasoning-gym families never trained on    (ood_tasks, ood_eval)
#   paper (ood.lm_eval, ood.evalplus): lm-evaluation-harness and evalplus on vLLM, one GPU job per
#   checkpoint and harness (resources.ood), then their JSON parsed          (ood_lm_eval, ood_evalplus, ood_table)
#   snakemake --cores 2 results/tiny/ood/ood.parquet

OOD = CFG.get("ood") if CFG.get("rl") else None

if OOD:
    from sparserl.evaluation.ood import harness_outputs, ood_settings, parse_label
    from sparserl.evaluation.ood import policies as ood_policies

    try:
        OOD_SETTINGS = ood_settings(CFG)
    except ConfigError as e:
        raise WorkflowError(f"config error: {e}")
    OP = P.ood

    def ood_checkpoint_input(label):
        """The checkpoint a policy label reads: the start policy (none for a hub policy) or the
        final/ of the run that trains the method (its owner's, methods.run.method_run)."""
        method, seed = parse_label(label)
        if method == "start":
            return policy_input(RL_POLICY)
        return [str(method_run(CFG, method, seed).final)]

    def ood_checkpoints():
        """`--policies` of ood-eval and ood-table: label=checkpoint of every OOD policy, in order."""
        return " ".join(f"{label}={ood_checkpoint_input(label)[0]}" for label, _, _ in ood_policies(CFG))

    def ood_targets():
        return [str(OP.table())]

    if OOD_SETTINGS.get("benchmarks"):

        rule ood_tasks:
            input:
                tokenizer=str(P.tokenizer()),
                corpus=str(P.pretrain_corpus()),
                benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
            output:
                [str(OP.task(b["name"])) for b in OOD_SETTINGS["benchmarks"]],
            params:
                key=cfg_key("ood", "tasks", "seed"),
            log:
                str(P.stage("logs", "ood_tasks.log")),
            resources:
                **R("cpu_small"),
            shell:
                "{SPARSERL} ood-tasks --config {CONFIGS} --tokenizer {input.tokenizer} --corpus {input.corpus} "
                "--benchmarks {input.benchmarks} --out {output} > {log} 2>&1"

        rule ood_eval:
            input:
                tasks=[str(OP.task(b["name"])) for b in OOD_SETTINGS["benchmarks"]],
                checkpoints=sorted({f for label, _, _ in ood_policies(CFG) for f in ood_checkpoint_input(label)}),
            output:
                str(OP.table()),
            params:
                key=cfg_key("ood", "evaluation", "rollout"),
                policies=ood_checkpoints(),
            log:
                str(P.stage("logs", "ood_eval.log")),
            threads: T("rollout")
            resources:
                **R("rollout"),
            shell:
                "{SPARSERL} ood-eval --config {CONFIGS} --tasks {input.tasks} --policies {params.policies} "
                "--out {output} --threads {threads} > {log} 2>&1"

    else:
        OOD_LABELS = "start|[A-Za-z0-9_]+/seed[0-9]+"

        rule ood_lm_eval:
            input:
                checkpoint=lambda w: ood_checkpoint_input(w.policy),
            output:
                str(OP.harness("{policy}", "lm_eval")),
            wildcard_constraints:
                policy=OOD_LABELS,
            params:
                key=cfg_key("ood", "rollout"),
            log:
                str(P.stage("logs", "ood_lm_eval_{policy}.log")),
            threads: T("ood")
            resources:
                **R("ood"),
            shell:
                "{SPARSERL} ood-harness --config {CONFIGS} --tool lm_eval --policy {wildcards.policy} "
                "--checkpoint {input.checkpoint} --out {output} > {log} 2>&1"

        rule ood_evalplus:
            input:
                checkpoint=lambda w: ood_checkpoint_input(w.policy),
            output:
                str(OP.harness("{policy}", "evalplus", "{dataset}")),
            wildcard_constraints:
                policy=OOD_LABELS,
                dataset="humaneval|mbpp",
            params:
                key=cfg_key("ood", "rollout"),
            log:
                str(P.stage("logs", "ood_evalplus_{policy}_{dataset}.log")),
            threads: T("ood")
            resources:
                **R("ood"),
            shell:
                "{SPARSERL} ood-harness --config {CONFIGS} --tool evalplus --dataset {wildcards.dataset} "
                "--policy {wildcards.policy} --checkpoint {input.checkpoint} --out {output} > {log} 2>&1"

        rule ood_table:
            input:
                [str(OP.harness(label, tool, ds)) for label, tool, ds in harness_outputs(CFG)],
            output:
                str(OP.table()),
            params:
                policies=ood_checkpoints(),
            localrule: True
            resources:
                **R("cpu_small"),
            shell:
                "{SPARSERL} ood-table --config {CONFIGS} --harness {input} --policies {params.policies} --out {output}"
