"""Checks the figure tests share: a figure that draws error bars or bands says what they are."""
from sparserl.core.paths import Paths
from sparserl.figures.registry import draws_error_bars, pyplot


def assert_error_bars_stated(f, cfg) -> bool:
    """Draw registered figure `f` from its cached tables; if it draws error bars or bands, its
    `bars` must say what they are (the footer prints it). Returns whether it drew any."""
    data = f.read(cfg, f.tables(Paths(cfg)))
    fig, axes = f.layout(data)
    try:
        f.draw(data, axes)
        drawn = draws_error_bars(fig)
    finally:
        pyplot().close(fig)
    assert not drawn or f.bars.strip(), f"{f.id} draws error bars or bands but register_figure has no bars="
    return drawn
