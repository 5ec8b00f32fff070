# Stage: RL runs for each method (configs/methods/<name>.yaml) x seed, their evaluation, a summary.
# Local scales train with the CPU trainer; the paper scale runs OpenRLHF on SLURM (rl_cluster).

RL = CFG.get("rl")

if RL:
    from sparserl.evaluation.splits import slip_inputs
    from sparserl.methods.run import method_run

    RL_POLICY = RL["policy"]

    RUN = P.run("{method}", "{seed}")  # wildcards; sparserl.core.paths.RunPaths
    # what the terminal shows while a run trains: its log (a line per step, with an ETA) and
    # its TensorBoard folder (training scalars, evaluation accuracy, hyperparameters)
    TRAIN_MESSAGE = ("training {wildcards.method} seed {wildcards.seed}: tail -f {log}; "
                     + "tensorboard --logdir " + str(RUN.tensorboard).replace("{method}", "{wildcards.method}")
                     .replace("{seed}", "{wildcards.seed}"))

    def rl_inputs(w):
        """What the run reads (methods.run.run_inputs): the start policy, the pool, the reference
        cache, V0 and the pool's embeddings (workflow/rules/values.smk), rl.lr_tuning's chosen
        rates (workflow/rules/tuning.smk)."""
        return list(rl_run(w).inputs)

    if rl_engine(CFG) == "local":

        rule rl_train:
            input:
                rl_inputs,
            output:
                metrics=str(RUN.metrics),
                rollouts=str(RUN.rollouts),
                final=directory(str(RUN.final)),
            wildcard_constraints:
                method="[A-Za-z0-9_]+",
                seed="[0-9]+",
            params:
                key=lambda w: run_key(rl_run(w)),
            log:
                str(P.stage("logs", "rl_{method}_seed{seed}.log")),
            threads: T("rl")
            resources:
                **R("rl"),
            message:
                TRAIN_MESSAGE
            shell:
                "{SPARSERL} rl-train --config {CONFIGS} --method {wildcards.method} "
                "--seed {wildcards.seed} --out {output.final} --threads {threads} > {log} 2>&1"

    else:

        rule rl_cluster:
            # Ray on the SLURM allocation, then OpenRLHF with our plugin (sparserl.engines.openrlhf)
            input:
                rl_inputs,
            output:
                metrics=str(RUN.metrics),
                rollouts=str(RUN.rollouts),
                final=directory(str(RUN.final)),
            wildcard_constraints:
                method="[A-Za-z0-9_]+",
                seed="[0-9]+",
            params:
                key=lambda w: run_key(rl_run(w)),
            log:
                str(P.stage("logs", "rl_{method}_seed{seed}.log")),
            threads: T("rl")
            resources:
                **SIZED("rl", "rl_cluster"),
            shell:
                "{SPARSERL} openrlhf-launch --config {CONFIGS} --method {wildcards.method} "
                "--seed {wildcards.seed} --out {output.final} > {log} 2>&1"

    rule rl_eval:
        input:
            final=str(RUN.final),
            benchmarks=[str(P.benchmark(b)) for b in BENCHMARKS],
        output:
            str(RUN.eval),
        wildcard_constraints:
            method="[A-Za-z0-9_]+",
            seed="[0-9]+",
        log:
            str(P.stage("logs", "rl_eval_{method}_seed{seed}.log")),
        threads: T("rl_eval", T("rollout"))
        resources:
            **(R("rl_eval") or R("rollout")),
        shell:
            "{SPARSERL} rl-eval --config {CONFIGS} --method {wildcards.method} "
            "--seed {wildcards.seed} --benchmarks {input.benchmarks} --threads {threads} > {log} 2>&1"

    rule rl_summary:
        input:
            # a method whose spec repeats an earlier one's reads that run (methods.spec.run_owners)
            sorted({str(f) for m in RL["methods"] for s in RL["seeds"]
                    for f in (method_run(CFG, m, s).metrics, method_run(CFG, m, s).eval)})
            # the start policy's evaluation: the summary's gains are over it
            + ([str(P.eval_table(RL_POLICY))] if RL_POLICY in EVAL_POLICIES else [])
            # the slip-template split labels the benchmarks' problems (sparserl.evaluation.splits)
            + [str(b) for b in slip_inputs(P)],
        output:
            runs=str(P.rl_runs()),
            summary=str(P.rl_summary()),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} rl-summary --config {CONFIGS} --out-runs {output.runs} --out-summary {output.summary}"

    # the summary as Markdown, with the commit and config hash of the run it reads
    # (sparserl.studies.world_compare): docs/world.md links here instead of typing numbers
    rule world_compare:
        input:
            str(P.rl_summary()),
        output:
            str(P.world_compare()),
        params:
            results="{}={}".format("world 2.0" if (CFG.get("tasks") or {}).get("world") else "world 1", P.results),
        log:
            str(P.stage("logs", "world_compare.log")),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} world-compare --results {params.results:q} --out {output} > {log} 2>&1"

    rule rl:
        input:
            str(P.rl_summary()),
            str(P.world_compare()),
        localrule: True

    # One target per method file, whether or not `rl.methods` lists it (that list says what `all`
    # and the head-to-head compare):
    #   snakemake --cores 2 rl/grpo_g4                        # train and evaluate rl.seeds
    #   snakemake --cores 2 rl/grpo_g4 --config rl.steps=20   # shorter
    from sparserl.methods.spec import method_names

    def rl_method_dirs(method):
        """The run folders of `method`, one per seed of rl.seeds (its owner's, `method_run`)."""
        return [method_run(CFG, method, s).dir for s in RL["seeds"]]

    for _method in method_names():

        rule:
            name:
                f"rl/{_method}"
            input:
                [str(f) for s in RL["seeds"] for f in (method_run(CFG, _method, s).metrics,
                                                        method_run(CFG, _method, s).eval)],
            localrule: True
