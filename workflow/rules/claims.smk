# Stage: the claims table (sparserl.studies.claims). One row per headline claim of the four papers,
# measured on cached artifacts, its status decided by a rule in code; never trains anything.
#   snakemake --cores 2 paper_figures/tiny/CLAIMS.md
#   python -m sparserl claims --list                 # the claims and the artifacts each reads
# Inputs: the artifacts of the claims this config makes (a claim whose artifact the config never
# makes reads "not run at this scale" instead).

from sparserl.studies.claims import claim_inputs


def claims_targets():
    return [str(P.claims_md()), str(P.claims_csv())]


rule claims:
    input:
        claim_inputs(CFG),
    output:
        md=str(P.claims_md()),
        csv=str(P.claims_csv()),
    params:
        name=CONFIG_NAME,
    log:
        str(P.stage("logs", "claims.log")),
    # seconds from cached tables: not worth a cluster job
    localrule: True
    resources:
        **R("cpu_small"),
    shell:
        "{SPARSERL} claims --config {CONFIGS} --config-name {params.name:q} "
        "--out-md {output.md} --out-csv {output.csv} > {log} 2>&1"
