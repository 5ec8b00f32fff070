# Stage: the head-to-head of every RL method (no paper has it), from the RL runs' cached
# tables only: ranking with 95% CIs and tie groups, the pairs, accuracy vs rollouts and wall time.
#   snakemake --cores 2 head_to_head                               # results/{scale}/head_to_head/*.parquet
#   snakemake --cores 2 head_to_head_aggregates    # iqm, improvement, profiles.parquet (rliable)
# A second start policy, so intervals cover the pre-training seed: build its tree, then pool it (head_to_head.pool):
#   snakemake --cores 2 head_to_head --configfile configs/tiny.yaml configs/overlays/start1.yaml
#   snakemake --cores 2 head_to_head --configfile configs/tiny.yaml configs/overlays/pool_start1.yaml
# Its figures (paper_figures/{scale}/head_to_head/) are registered in sparserl.figures.head_to_head.


def head_to_head_targets():
    """The head-to-head's tables; empty without an `rl` section."""
    tables = ("ranking", "pairs", "curves", "iqm", "improvement", "profiles")
    return [str(P.head_to_head(t)) for t in tables] if CFG.get("rl") else []


if CFG.get("rl"):
    from sparserl.figures import report as figure_report
    from sparserl.studies.head_to_head import HeadToHeadError, missing_pool
    from sparserl.studies.head_to_head import input_tables as head_to_head_inputs
    from sparserl.evaluation.splits import slip_inputs

    # head_to_head.pool: other start policies' trees, built by their own runs of this
    # DAG (no rule here makes their files): one missing is one line naming it and that command
    # the pooled tree's command: this config's files but those that set the pool
    _own_files = [str(f) for f in (workflow.overwrite_configfiles or workflow.configfiles)
                  if "head_to_head" not in (read_yaml(f) or {})]
    try:
        _pool_missing = missing_pool(P, " ".join(_own_files))
    except HeadToHeadError as e:
        _pool_missing = str(e)
    if _pool_missing:
        raise WorkflowError(_pool_missing)

    rule head_to_head:
        input:
            # each run's metrics and eval.parquet (aliases read their owner's run), the start
            # policy's evaluation; the per-problem tables come with eval.parquet (`sparserl rl-eval`);
            # with head_to_head.pool, the same of every pooled tree
            [str(t) for t in head_to_head_inputs(P)],
            # the slip-template split labels the benchmarks' problems (sparserl.evaluation.splits)
            slips=[str(b) for b in slip_inputs(P)],
        output:
            ranking=str(P.head_to_head("ranking")),
            pairs=str(P.head_to_head("pairs")),
            curves=str(P.head_to_head("curves")),
            # the ranking as a table in `snakemake --report` (it shows HTML, not parquet)
            table=report(
                str(P.head_to_head("ranking").with_suffix(".html")),
                caption="../report/ranking.rst",
                category=figure_report.PAPERS["head_to_head"],
                subcategory=figure_report.subcategory(CFG, CONFIG_NAME),
                labels={"figure": "ranking table"},
            ),
        log:
            str(P.stage("logs", "head_to_head.log")),
        # a few seconds from cached tables: not worth a cluster job
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} head-to-head --config {CONFIGS} --out {output.ranking} {output.pairs} {output.curves} "
            "> {log} 2>&1 && "
            "{SPARSERL} ranking-html --config {CONFIGS} --ranking {output.ranking} --out {output.table} >> {log} 2>&1"

    # IQM, probability of improvement and performance profiles over benchmarks x seeds through
    # rliable (sparserl.studies.aggregates); the same runs as the head-to-head, read the same way:
    # with head_to_head.pool, every pooled tree's runs and start evaluation, a run a (start, seed)
    rule head_to_head_aggregates:
        input:
            [str(t) for t in head_to_head_inputs(P)],
        output:
            iqm=str(P.head_to_head("iqm")),
            improvement=str(P.head_to_head("improvement")),
            profiles=str(P.head_to_head("profiles")),
        log:
            str(P.stage("logs", "head_to_head_aggregates.log")),
        # a minute of bootstrap from cached tables (42 methods x 3 seeds x 6 benchmarks; 1 seed
        # has nothing to resample and takes seconds): not worth a cluster job
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} head-to-head-aggregates --config {CONFIGS} "
            "--out {output.iqm} {output.improvement} {output.profiles} > {log} 2>&1"
