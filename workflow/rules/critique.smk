# Stage: Le Critique (sparserl.envs, sparserl.engines.local.critique). Its own world under
# results/{scale}/critique/: the envs' noisy demonstrations and a tokenizer, policy c pre-trained
# on them, then one RL run per (experiment, method, seed) with Mean, VF, Pvf, Tether, EVPO, and
# the runs tables its figures (le_critique/*) read.
#   snakemake --cores 2 critique                       # every run and the tables
#   python -m sparserl show results/tiny/critique/final.parquet

CRITIQUE = CFG.get("critique")

if CRITIQUE and rl_engine(CFG) == "local":
    from sparserl.envs.world import experiments as critique_experiments, seeds as critique_seeds

    from sparserl.methods.spec import load_method as _load_method

    for _e in critique_experiments(CFG):  # a bad method file stops the parse, naming file and key
        for _m in _e.methods:
            try:
                _load_method(_m)
            except ConfigError as e:
                raise WorkflowError(f"config error: critique.experiments.{_e.name}: {e}")

    CP = P.critique
    # what the terminal shows while a run trains: its log and its TensorBoard folder
    CRITIQUE_TRAIN_MESSAGE = ("training {wildcards.method} on {wildcards.exp} seed {wildcards.seed}: tail -f {log}; "
                              + "tensorboard --logdir " + str(CP.run("{exp}", "{method}", "{seed}").tensorboard)
                              .replace("{exp}", "{wildcards.exp}").replace("{method}", "{wildcards.method}")
                              .replace("{seed}", "{wildcards.seed}"))
    CRITIQUE_RUNS = [(e.name, m, s) for e in critique_experiments(CFG) for m in e.methods
                     for s in critique_seeds(CFG)]
    CRITIQUE_ENVS = sorted({e.env for e in critique_experiments(CFG)})

    def critique_key(*parts):
        from sparserl.core.artifacts import config_hash
        return config_hash({p: CRITIQUE.get(p) for p in parts})

    def critique_run(w):
        """The run of a job's wildcards (exp, method, seed): methods.run.resolve_critique_run."""
        from sparserl.methods.run import resolve_critique_run
        return resolve_critique_run(CFG, w.exp, w.method, w.seed)

    rule critique_world:
        output:
            corpus=str(CP.corpus()),
            tokenizer=directory(str(CP.tokenizer())),
        params:
            key=critique_key("envs", "corpus", "tokenizer"),
        log:
            str(P.stage("logs", "critique_world.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} critique-world --config {CONFIGS} --corpus {output.corpus} --tokenizer {output.tokenizer} "
            "> {log} 2>&1"

    rule critique_pretrain:
        input:
            corpus=str(CP.corpus()),
            tokenizer=str(CP.tokenizer()),
        output:
            policy=directory(str(CP.policy())),
            # pretrain.snapshots of policy c too (c@p50, ...), beside it: written, so declared
            snapshots=[directory(f"{CP.policy()}@{tag}") for tag in P.snapshot_tags()],
        params:
            key=critique_key("envs", "corpus", "tokenizer", "policy", "pretrain"),
        log:
            str(P.stage("logs", "critique_pretrain.log")),
        threads: T("pretrain")
        resources:
            **R("pretrain"),
        shell:
            "{SPARSERL} critique-pretrain --config {CONFIGS} --corpus {input.corpus} --tokenizer {input.tokenizer} "
            "--out {output.policy} --snapshots {output.snapshots} --threads {threads} > {log} 2>&1"

    rule critique_start:
        input:
            policy=str(CP.policy()),
        output:
            str(CP.start_eval("{env}")),
        wildcard_constraints:
            env="|".join(CRITIQUE_ENVS),
        params:
            key=lambda w: critique_key("rl") + str(CRITIQUE["envs"][w.env]),
        log:
            str(P.stage("logs", "critique_start_{env}.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} critique-start --config {CONFIGS} --env {wildcards.env} --policy {input.policy} "
            "--out {output} > {log} 2>&1"

    rule critique_train:
        input:
            policy=lambda w: critique_run(w).inputs[0],  # policy c
        output:
            metrics=str(CP.run("{exp}", "{method}", "{seed}").metrics),
            summary=str(CP.run("{exp}", "{method}", "{seed}").dir / "summary.json"),
        wildcard_constraints:
            exp="[^/]+",
            method="[^/]+",
            seed=r"\d+",
        params:
            key=lambda w: run_key(critique_run(w)),
        log:
            str(P.stage("logs", "critique", "{exp}_{method}_seed{seed}.log")),
        threads: T("rl")
        resources:
            **R("rl"),
        message:
            CRITIQUE_TRAIN_MESSAGE
        shell:
            "{SPARSERL} critique-train --config {CONFIGS} --experiment {wildcards.exp} "
            "--method {wildcards.method} --seed {wildcards.seed} --policy {input.policy} "
            "--metrics {output.metrics} --summary {output.summary} --threads {threads} > {log} 2>&1"

    rule critique_summary:
        input:
            runs=[str(CP.run(e, m, s).dir / "summary.json") for e, m, s in CRITIQUE_RUNS],
            starts=[str(CP.start_eval(env)) for env in CRITIQUE_ENVS],
        output:
            runs=str(CP.runs_table()),
            final=str(CP.final_table()),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} critique-summary --config {CONFIGS} --runs {input.runs} --starts {input.starts} "
            "--out-runs {output.runs} --out-final {output.final}"

    rule critique:
        input:
            str(CP.final_table()),
        localrule: True

    def critique_targets():
        return [str(CP.runs_table()), str(CP.final_table())]


# --------------------------------------------------------------------------------------------
# Paper scale (rollout.backend vllm): Le Critique on OpenRLHF (sparserl.engines.openrlhf.critique).
# The runs start from a hub policy (critique.policy_hub, or an experiment's own policy_hub): no
# world, no pre-training. One GPU job per (experiment, method, seed) on resources.rl, one per env
# for the start policy's held-out reward on resources.rollout; the tables as at tiny scale.
#   snakemake --profile slurm critique

if CRITIQUE and rl_engine(CFG) == "openrlhf":
    from sparserl.envs.world import experiments as critique_experiments, seeds as critique_seeds

    from sparserl.methods.spec import load_method as _load_method

    for _e in critique_experiments(CFG):  # a bad method file stops the parse, naming file and key
        for _m in _e.methods:
            try:
                _load_method(_m)
            except ConfigError as e:
                raise WorkflowError(f"config error: critique.experiments.{_e.name}: {e}")

    CP = P.critique
    CRITIQUE_RUNS = [(e.name, m, s) for e in critique_experiments(CFG) for m in e.methods
                     for s in critique_seeds(CFG, e.name)]
    CRITIQUE_ENVS = sorted({e.env for e in critique_experiments(CFG)})
    CP_EXPERIMENT_ENV = {e.name: e.env for e in critique_experiments(CFG)}

    def critique_start_key(w):
        from sparserl.core.artifacts import config_hash
        return config_hash({"rl": CRITIQUE["rl"], "env": CRITIQUE["envs"][w.env],
                            "experiments": [(e.name, e.rl, str(CP.policy(e.name)))
                                            for e in critique_experiments(CFG) if e.env == w.env],
                            "rollout": CFG["rollout"]})

    def critique_run(w):
        """The run of a job's wildcards (exp, method, seed): methods.run.resolve_critique_run."""
        from sparserl.methods.run import resolve_critique_run
        return resolve_critique_run(CFG, w.exp, w.method, w.seed)

    def critique_models(env, exps):
        """The hub policies these experiments start from (fetch_models' copies) and the env's
        hand-placed files (MiniF2F, the Lean REPL): the job waits for them, a dry run flags them."""
        return [str(CP.policy(e)) for e in exps] + hand_placed(f"critique.envs.{env}")

    rule critique_start:
        input:
            lambda w: critique_models(w.env, [e.name for e in critique_experiments(CFG) if e.env == w.env]),
        output:
            str(CP.start_eval("{env}")),
        wildcard_constraints:
            env="|".join(CRITIQUE_ENVS),
        params:
            key=critique_start_key,
        log:
            str(P.stage("logs", "critique_start_{env}.log")),
        threads: T("rollout")
        resources:
            **R("rollout"),
        shell:
            "{SPARSERL} critique-start --config {CONFIGS} --env {wildcards.env} --out {output} > {log} 2>&1"

    rule critique_train:
        # Ray on the SLURM allocation, then OpenRLHF with the env's reward function or agent
        input:
            # the run's start policy (a hub model's local copy) and the env's hand-placed files
            policy=lambda w: str(critique_run(w).reads.policy),
            hand_placed=lambda w: hand_placed(f"critique.envs.{CP_EXPERIMENT_ENV[w.exp]}"),
        output:
            metrics=str(CP.run("{exp}", "{method}", "{seed}").metrics),
            summary=str(CP.run("{exp}", "{method}", "{seed}").dir / "summary.json"),
        wildcard_constraints:
            exp="[^/]+",
            method="[^/]+",
            seed=r"\d+",
        params:
            key=lambda w: run_key(critique_run(w)),
        log:
            str(P.stage("logs", "critique", "{exp}_{method}_seed{seed}.log")),
        threads: T("rl")
        resources:
            **SIZED("rl", "critique_train"),
        shell:
            "{SPARSERL} critique-openrlhf --config {CONFIGS} --experiment {wildcards.exp} "
            "--method {wildcards.method} --seed {wildcards.seed} --policy {input.policy} "
            "--metrics {output.metrics} --summary {output.summary} > {log} 2>&1"

    rule critique_summary:
        input:
            runs=[str(CP.run(e, m, s).dir / "summary.json") for e, m, s in CRITIQUE_RUNS],
            starts=[str(CP.start_eval(env)) for env in CRITIQUE_ENVS],
        output:
            runs=str(CP.runs_table()),
            final=str(CP.final_table()),
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} critique-summary --config {CONFIGS} --runs {input.runs} --starts {input.starts} "
            "--out-runs {output.runs} --out-final {output.final}"

    rule critique:
        input:
            str(CP.final_table()),
        localrule: True

    def critique_targets():
        return [str(CP.runs_table()), str(CP.final_table())]
