# Stage: the claims table (sparserl.studies.claims). One row per headline claim of the four papers,
# measured on cached artifacts, its statuses (direction, magnitude, overall) decided by rules in
# code; never trains anything. CLAIMS.html is the same table for `snakemake --report`.
#   snakemake --cores 2 paper_figures/tiny/CLAIMS.md
#   python -m sparserl claims --list                 # the claims and the artifacts each reads
# Inputs: the artifacts of the claims this config makes (a claim whose artifact the config never
# makes reads "not run at this scale" instead); with head_to_head.pool, the RL rows' runs and start
# evaluations of every pooled tree that ran their methods (as the head_to_head rule; a pooled tree
# not yet built stops the DAG there in one line).

from sparserl.figures import report as figure_report
from sparserl.studies.claims import claim_inputs, html_path as claims_html


def claims_targets():
    return [str(P.claims_md()), str(P.claims_csv()), str(claims_html(P.claims_md())), str(P.results_md())]


rule claims:
    input:
        claim_inputs(P),
    output:
        md=str(P.claims_md()),
        csv=str(P.claims_csv()),
        html=report(
            str(claims_html(P.claims_md())),
            caption="../report/claims.rst",
            category="Claims",
            subcategory=figure_report.subcategory(CFG, CONFIG_NAME),
            labels={"table": "claims of the four papers"},
        ),
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
        "--out-md {output.md} --out-csv {output.csv} --out-html {output.html} > {log} 2>&1"


# The reading (sparserl.studies.reading): per paper, which claims hold, where its methods rank, the
# diagnostic arms and the premises, every number a cell of these tables; docs/results_<scale>.md
# copies it (`sparserl reading --copy-to`). A rebuild rule (sparserl.cli.published.REBUILD_RULES).
#   snakemake --cores 2 paper_figures/tiny/RESULTS.md
from sparserl.studies.reading import Inputs as reading_inputs


READING_INPUTS = {k: str(p) for k, p in reading_inputs.of(P).named().items()}


rule reading:
    input:
        **READING_INPUTS,
    output:
        md=str(P.results_md()),
    params:
        name=CONFIG_NAME,
    log:
        str(P.stage("logs", "reading.log")),
    # seconds from cached tables: not worth a cluster job
    localrule: True
    resources:
        **R("cpu_small"),
    shell:
        "{SPARSERL} reading --config {CONFIGS} --config-name {params.name:q} "
        + "".join(f"--{k} {{input.{k}}} " for k in READING_INPUTS)
        + "--out-md {output.md} > {log} 2>&1"
