"""Figures: one registry of figure id -> drawing function -> cached tables -> caption.

`registry` holds the machinery (`register_figure`, `list_figures`, `make_figure`); `studies`,
`rl` and `v0` register their drawing functions when imported, which importing this package does.
"""
from sparserl.figures.registry import (Figure, FigureError, MissingTableError, get_figure, list_figures,  # noqa: F401
                                       make_figure, register_figure, registered)
from sparserl.figures import studies, basis_checkpoints, rl, head_to_head, pass_at_k, v0, le_critique, basis_ood, v05, basis, world  # noqa: F401,E402,I001  (each registers its figures on import; studies first)
