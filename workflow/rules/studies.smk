# Stage: value-estimation studies on the cached rollouts (BASIS §5.1/App. A; V0.5 statistics).
# Data rules read the reference cache and the oracle (basis.smk) and never generate rollouts;
# the study figures are registered in sparserl.figures.studies and get their rules in figures.smk.
#   snakemake --cores 2 studies                                    # every study figure + summary
#   snakemake --cores 2 paper_figures/tiny/basis/mse_by_method.png # one figure
# Settings: config `basis.study` (defaults in sparserl.studies.DEFAULTS).

from sparserl.studies import BASIS_SENSITIVITY, BASIS_TABLES, V05_RUN_TABLES, StudyPaths, settings, study_refs

SP = StudyPaths(CFG)
STUDY_REFS = study_refs(CFG)


def study_targets():
    """Every study table CSV and summary; empty unless basis.study_reference/oracle are set."""
    return [str(p) for p in SP.targets()] if STUDY_REFS else []


if STUDY_REFS:
    STUDY_CACHES = dict(ref=str(P.reference_cache(STUDY_REFS[0])), oracle=str(P.oracle(STUDY_REFS[1])))

    rule study_basis_batches:
        input:
            **STUDY_CACHES,
        output:
            str(SP.basis_batches()),
        log:
            str(P.stage("logs", "study_basis_batches.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-basis-batches --config {CONFIGS} --reference {input.ref} "
            "--oracle {input.oracle} --out {output} > {log} 2>&1"

    rule study_basis_table:
        input:
            str(SP.basis_batches()),
        output:
            table=str(SP.table("basis", "{table}")),
            csv=str(SP.csv("basis", "{table}")),
        wildcard_constraints:
            table="|".join(BASIS_TABLES),
        log:
            str(P.stage("logs", "study_basis_{table}.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-basis-table --config {CONFIGS} --table {wildcards.table} "
            "--batches {input} --out {output.table} > {log} 2>&1"

    rule study_basis_sensitivity:
        input:
            **STUDY_CACHES,
        output:
            table=str(SP.table("basis", "sensitivity_{param}")),
            csv=str(SP.csv("basis", "sensitivity_{param}")),
        wildcard_constraints:
            param="|".join(BASIS_SENSITIVITY),
        log:
            str(P.stage("logs", "study_basis_sensitivity_{param}.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-basis-sensitivity --config {CONFIGS} --param {wildcards.param} "
            "--reference {input.ref} --oracle {input.oracle} --out {output.table} > {log} 2>&1"

    rule study_basis_summary:
        input:
            str(SP.basis_batches()),
        output:
            str(SP.summary("basis")),
        log:
            str(P.stage("logs", "study_basis_summary.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-basis-summary --config {CONFIGS} --batches {input} --out {output} > {log} 2>&1"

    def v05_study_inputs(w):
        """The caches, and the trained V0 when the study compares its prior (basis.study.v05.v0_prior)."""
        ins = dict(STUDY_CACHES)
        if settings(CFG)["v05"].get("v0_prior"):  # as the study command reads it
            ins["v0"] = str(P.v0_prior_model())
        return ins

    rule study_v05_bias:
        input:
            unpack(v05_study_inputs),
        output:
            table=str(SP.table("v05", "bias_mse_by_k")),
            csv=str(SP.csv("v05", "bias_mse_by_k")),
        log:
            str(P.stage("logs", "study_v05_bias.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-v05-bias --config {CONFIGS} --reference {input.ref} "
            "--oracle {input.oracle} --out {output.table} > {log} 2>&1"

    rule study_v05_osla:
        input:
            unpack(v05_study_inputs),
        output:
            str(SP.v05_runs()),
        log:
            str(P.stage("logs", "study_v05_osla.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-v05-osla --config {CONFIGS} --reference {input.ref} "
            "--oracle {input.oracle} --out {output} > {log} 2>&1"

    rule study_v05_table:
        input:
            str(SP.v05_runs()),
        output:
            table=str(SP.table("v05", "{table}")),
            csv=str(SP.csv("v05", "{table}")),
        wildcard_constraints:
            table="|".join(V05_RUN_TABLES),
        log:
            str(P.stage("logs", "study_v05_{table}.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-v05-table --config {CONFIGS} --table {wildcards.table} "
            "--runs {input} --out {output.table} > {log} 2>&1"

    rule study_v05_summary:
        input:
            bias=str(SP.table("v05", "bias_mse_by_k")),
            runs=str(SP.v05_runs()),
        output:
            str(SP.summary("v05")),
        log:
            str(P.stage("logs", "study_v05_summary.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-v05-summary --config {CONFIGS} --bias {input.bias} --runs {input.runs} "
            "--out {output} > {log} 2>&1"

    rule studies:
        input:
            # figures.smk, included after this file, defines figure_targets
            lambda w: study_targets() + figure_targets("basis", "v05"),
        localrule: True
        run:
            print(f"\nstudies ({SCALE}): figures under {P.figure_dir('basis')}/ and {P.figure_dir('v05')}/")
