# Stage: figures. One rule per registered figure (sparserl.figures), generated from the registry:
# its input is the cached tables the figure reads, so redrawing a figure reruns nothing else.
#   snakemake --cores 2 figures                                    # every figure of the config
#   snakemake --cores 2 paper_figures/tiny/rl/learning_curves.png  # one figure
#   python -m sparserl figure --list                               # ids, PNGs and captions

from sparserl.figures import list_figures

FIGURES = list_figures(CFG)


def figure_targets(*groups):
    """The PNG of every figure of this config (only those of `groups`, e.g. "basis", if given)."""
    return [str(f.output(CFG)) for f in FIGURES if not groups or f.group in groups]


for _fig in FIGURES:

    rule:
        name:
            _fig.rule
        input:
            [str(t) for t in _fig.tables(CFG)],
        output:
            str(_fig.output(CFG)),
        params:
            id=_fig.id,
        log:
            str(P.stage("logs", f"{_fig.rule}.log")),
        # a figure takes seconds from cached tables: not worth a cluster job
        localrule: True
        resources:
            **R("cpu_small"),
        shell:
            "{SPARSERL} figure --config {CONFIGS} --id {params.id} --out {output} > {log} 2>&1"


rule figures:
    input:
        figure_targets(),
    localrule: True
    run:
        print(f"\nfigures ({SCALE}) under {P.figures}/:")
        for f in FIGURES:
            print(f"  {f.output(CFG)}  {f.caption}")
