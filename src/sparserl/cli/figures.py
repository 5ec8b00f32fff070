"""`python -m sparserl figure`: draw one registered figure (`sparserl.figures`) from its cached
tables; workflow/rules/figures.smk generates one rule per figure that calls it with the rule's
`--tables {input}` and `--out {output.png}`. Run by hand, the command resolves both from the
config's results layout.

    sparserl figure --config configs/tiny.yaml --list                    # by paper, with what is left out
    sparserl figure --config configs/tiny.yaml --id basis/f3a_mse_by_method  # one PNG
"""
from __future__ import annotations

from pathlib import Path


def cmd_figure(args):
    from sparserl.core.config import load_config
    from sparserl.methods.run import layout
    from sparserl.figures import FigureError
    cfg = load_config(args.config)
    P = layout(cfg)
    if args.config_name is None:
        files = args.config if isinstance(args.config, list) else [args.config]
        args.config_name = "+".join(Path(f).name for f in files)
    if args.list:
        print(figure_list(cfg, P))
        return
    try:
        out = draw_figure(args.id, cfg, P, args.tables, args.out, args.config_name)
    except FigureError as e:  # unknown id, a config without that figure, a missing table: no traceback
        raise SystemExit(f"figure: {e}")
    print(f"figure -> {out}")


def draw_figure(fig_id: str, cfg: dict, P, tables: list | None = None, out: str | Path | None = None,
                config_name: str | None = None) -> Path:
    """Draw figure `fig_id` from `tables` (default: its tables in the layout `P`) to `out` (default:
    its PNG in `P`); the footer says when `P`'s results were restored from published tables."""
    from sparserl.core.published import origin_line
    from sparserl.figures import get_figure, make_figure
    f = get_figure(fig_id)
    f.require(cfg)  # before its tables: those of a figure the config lacks may not resolve
    return make_figure(fig_id, cfg, f.tables(P) if tables is None else tables, f.output(P) if out is None else out,
                       config_name=config_name, origin=origin_line(P.results))


def figure_list(cfg: dict, P) -> str:
    """Every registered figure grouped by paper: its PNG in the layout `P` and the first sentence of
    its caption, or why this config leaves it out (the figure's `unavailable(cfg)`)."""
    from sparserl.figures import registered
    groups: dict[str, list] = {}
    for f in registered():
        groups.setdefault(f.paper, []).append(f)
    lines = []
    for paper, figs in groups.items():
        made = [f for f in figs if not f.unavailable(cfg)]
        lines.append(f"{paper}: {len(made)} of {len(figs)} figures")
        for f in made:
            first = " ".join(f.caption.split()).split(". ")[0].rstrip(".")  # the caption's first sentence
            lines.append(f"  {f.id:34s} {f.output(P)}\n      {first}.")
        for f in figs:
            why = f.unavailable(cfg)
            if why:
                lines.append(f"  {f.id:34s} left out: {why}")
        lines.append("")
    return "\n".join(lines).rstrip()


def register(sub, add) -> None:
    """Add `figure` to the `sparserl` parser (`add` is cli.build_parser's helper)."""
    p = add("figure", cmd_figure, "draw one registered figure from its cached tables (--list: the config's figures)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--id", help="figure id, e.g. basis/f3a_mse_by_method or head_to_head/learning_curves")
    what.add_argument("--list", action="store_true", help="list every figure by paper: its PNG and caption, "
                                                          "or why this config leaves it out")
    p.add_argument("--tables", nargs="*", help="the cached tables it draws, in the figure's order (the rule's "
                                              "{input}; default: those of the config's results layout)")
    p.add_argument("--out", help="output PNG, the PDF and CSV beside it (default: paper_figures/{scale}/<id>.png)")
    p.add_argument("--config-name", help="the config file(s) the run was given, for the figure's footer "
                                         "(default: the --config file's name)")
