"""`python -m sparserl figure`: draw one registered figure (`sparserl.figures`) from its cached
tables; workflow/rules/figures.smk generates one rule per figure that calls it.

    sparserl figure --config configs/tiny.yaml --list                    # the config's figures
    sparserl figure --config configs/tiny.yaml --id basis/f3a_mse_by_method  # one PNG
"""
from __future__ import annotations

from pathlib import Path


def cmd_figure(args):
    from sparserl.core.config import load_config
    from sparserl.figures import FigureError, list_figures, make_figure
    cfg = load_config(args.config)
    if args.config_name is None:
        files = args.config if isinstance(args.config, list) else [args.config]
        args.config_name = "+".join(Path(f).name for f in files)
    if args.list:
        for f in list_figures(cfg):
            print(f"{f.id:28s} {f.output(cfg)}\n    {f.caption}")
        return
    try:
        out = make_figure(args.id, cfg, args.out, config_name=args.config_name)
    except FigureError as e:  # unknown id, a config without that figure, a missing table: no traceback
        raise SystemExit(f"figure: {e}")
    print(f"figure -> {out}")


def register(sub, add) -> None:
    """Add `figure` to the `sparserl` parser (`add` is cli.build_parser's helper)."""
    p = add("figure", cmd_figure, "draw one registered figure from its cached tables (--list: the config's figures)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--id", help="figure id, e.g. basis/f3a_mse_by_method or head_to_head/learning_curves")
    what.add_argument("--list", action="store_true", help="list the figures of this config, their PNGs and captions")
    p.add_argument("--out", help="output PNG, the PDF and CSV beside it (default: paper_figures/{scale}/<id>.png)")
    p.add_argument("--config-name", help="the config file(s) the run was given, for the figure's footer "
                                         "(default: the --config file's name)")
