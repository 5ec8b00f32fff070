# Stage: figures. One rule per registered figure (sparserl.figures), generated from the registry:
# its input is the cached tables the figure reads, so redrawing a figure reruns nothing else.
#   snakemake --cores 2 figures                                    # every figure of the config
#   snakemake --cores 2 paper_figures/tiny/head_to_head/learning_curves.png  # one figure
#   python -m sparserl figure --list                               # ids, PNGs and captions

from sparserl.figures import list_figures
from sparserl.figures import report as figure_report

FIGURES = list_figures(CFG)
# the cached tables of each figure in the DAG's layout P, computed once per parse (some take
# seconds: every RL run's); each figure's rule passes them to the command as --tables {input}
FIGURE_TABLES = {f.id: [str(t) for t in f.tables(P)] for f in FIGURES}
# `snakemake --report report.html`: every figure's PNG, with its caption from the registry (written
# at parse time, only when changed, to results/{scale}/report/), under its paper and the scale/config
CAPTIONS = figure_report.write_captions(FIGURES, P, CONFIG_NAME, FIGURE_TABLES)


report: "../report/workflow.rst"


def figure_targets(*groups):
    """The PNG of every figure of this config (only those of `groups`, e.g. "basis", if given)."""
    return [str(f.output(P)) for f in FIGURES if not groups or f.group in groups]


for _fig in FIGURES:

    rule:
        name:
            _fig.rule
        input:
            FIGURE_TABLES[_fig.id],
        output:
            png=report(
                str(_fig.outputs(P)["png"]),
                caption=str(CAPTIONS[_fig.id]),
                category=figure_report.category(_fig),
                subcategory=figure_report.subcategory(CFG, CONFIG_NAME),
                labels=figure_report.labels(_fig),
            ),
            pdf=str(_fig.outputs(P)["pdf"]),
            csv=str(_fig.outputs(P)["csv"]),
        params:
            id=_fig.id,
            name=CONFIG_NAME,
        log:
            str(P.stage("logs", f"{_fig.rule}.log")),
        # a figure takes seconds from cached tables: not worth a cluster job
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} figure --config {CONFIGS} --config-name {params.name:q} --id {params.id} "
            "--tables {input:q} --out {output.png} > {log} 2>&1"


rule figures:
    input:
        figure_targets(),
    localrule: True
    run:
        print(f"\nfigures ({SCALE}) under {P.figures}/:")
        for f in FIGURES:
            print(f"  {f.output(P)}  {f.caption}")


# One target per paper: its figures and tables, and only what they read
#   snakemake --cores 2 v05        # V0.5's figures, its RL runs and nothing else
for _paper in ("v0", "v05", "le_critique", "basis"):

    rule:
        name:
            _paper
        input:
            figure_targets(_paper),
        localrule: True
