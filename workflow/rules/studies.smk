# Stage: value-estimation studies on the cached rollouts (BASIS §5.1/App. A; V0.5 statistics).
# Data rules read the reference cache and the oracle (basis.smk) and never generate rollouts;
# the study figures are registered in sparserl.figures.studies and get their rules in figures.smk.
#   snakemake --cores 2 studies                                    # every study figure + summary
#   snakemake --cores 2 paper_figures/tiny/basis/f3a_mse_by_method.png # one figure
# Settings: config `basis.study` (defaults in the schema, $defs/study).
# The BASIS value study runs as the paper does (basis.study_checkpoints): early / middle / late
# checkpoints of one RL run (tiny: grpo_g8 seed 0, so `studies` waits on that run), each with its
# oracle (basis.smk's checkpoint_oracle), the start policy's reference cache as the reference. Rule
# study_basis_stages writes the per-stage MSE by method and Figure 2's table; F3/F5 and summary.json
# read the middle checkpoint. The stress test (stress_* tables, F3 only) is the pre-training snapshot
# pair basis.study_reference -> basis.study_oracle (s@p50 -> s@p75), a larger drift than an RL run's;
# it is the V0.5 statistics' data too, and F3/F5's where basis.study_checkpoints is unset (smoke).

from sparserl.studies import BASIS_SENSITIVITY, BASIS_TABLES, V05_RUN_TABLES, settings, study_refs, table_targets
from sparserl.studies.basis_checkpoints import study_variants
from sparserl.studies.basis_checkpoints import targets as checkpoint_targets

SP = P.studies
STUDY_REFS = study_refs(CFG)


def study_targets():
    """Every study table CSV and summary: the snapshot pair's (basis.study_reference/oracle) and
    the RL-checkpoint study's (basis.study_checkpoints), each when configured."""
    return ([str(p) for p in table_targets(SP)] if STUDY_REFS else []) + [str(p) for p in checkpoint_targets(SP)]


if STUDY_CKPTS:  # basis.smk

    rule study_basis_stages:
        input:
            ref=str(P.reference_cache(CFG["rl"]["policy"])),
            oracles=[str(c.oracle) for c in STUDY_CKPTS],
        output:
            mse=str(SP.table("basis", "stage_mse_by_method")),
            mse_csv=str(SP.csv("basis", "stage_mse_by_method")),
            f2=str(SP.table("basis", "stage_initial_vs_refined")),
            f2_csv=str(SP.csv("basis", "stage_initial_vs_refined")),
        log:
            str(P.stage("logs", "study_basis_stages.log")),
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} study-basis-stages --config {CONFIGS} --reference {input.ref} "
            "--oracles {input.oracles} --out {output.mse} {output.f2} > {log} 2>&1"


if STUDY_REFS:
    # the V0.5 statistics read the snapshot pair
    STUDY_CACHES = dict(ref=str(P.reference_cache(STUDY_REFS[0])), oracle=str(P.oracle(STUDY_REFS[1])))

    # The BASIS value study's F3 tables and summary: prefix "" reads the RL run's middle checkpoint
    # against the start policy when basis.study_checkpoints is set (the snapshot pair otherwise), prefix
    # "stress_" the snapshot pair (sparserl.studies.basis_checkpoints.study_variants). One rule each;
    # input, output and log are bound when the rule is defined, the shell takes none of the loop's names.
    for _prefix, (_ref, _oracle) in study_variants(P).items():
        _caches = dict(ref=str(_ref), oracle=str(_oracle))

        rule:
            name:
                f"study_basis_{_prefix}batches"
            input:
                **_caches,
            output:
                str(SP.basis_batches(_prefix)),
            log:
                str(P.stage("logs", f"study_basis_{_prefix}batches.log")),
            resources:
                **R("cpu_small"),
            shell:
                "{SPARSERL} study-basis-batches --config {CONFIGS} --reference {input.ref} "
                "--oracle {input.oracle} --out {output} > {log} 2>&1"

        rule:
            name:
                f"study_basis_{_prefix}table"
            input:
                str(SP.basis_batches(_prefix)),
            output:
                table=str(SP.table("basis", _prefix + "{table}")),
                csv=str(SP.csv("basis", _prefix + "{table}")),
            wildcard_constraints:
                table="|".join(BASIS_TABLES),
            log:
                str(P.stage("logs", f"study_basis_{_prefix}" + "{table}.log")),
            resources:
                **R("cpu_small"),
            shell:
                "{SPARSERL} study-basis-table --config {CONFIGS} --table {wildcards.table} "
                "--batches {input} --out {output.table} > {log} 2>&1"

        rule:
            name:
                f"study_basis_{_prefix}summary"
            input:
                str(SP.basis_batches(_prefix)),
            output:
                str(SP.summary("basis", _prefix)),
            log:
                str(P.stage("logs", f"study_basis_{_prefix}summary.log")),
            resources:
                **R("cpu_small"),
            shell:
                "{SPARSERL} study-basis-summary --config {CONFIGS} --batches {input} --out {output} > {log} 2>&1"

    # F5's sensitivity: the main study only (the stress test draws F3; tiny's DAG time)
    MAIN_CACHES = {k: str(v) for k, v in zip(("ref", "oracle"), study_variants(P)[""])}

    rule study_basis_sensitivity:
        input:
            **MAIN_CACHES,
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

    def v05_study_inputs(w):
        """The caches, and the trained V0 when the study compares its prior (basis.study.v05.v0_prior)."""
        ins = dict(STUDY_CACHES)
        if settings(CFG)["v05"].get("v0_prior"):  # as the study command reads it
            ins["v0"] = str(P.v0_prior_model())
            ins["v0_pool"] = V0_POOL_EMBEDDINGS
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
