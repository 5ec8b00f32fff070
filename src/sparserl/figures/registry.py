"""One registry of figures: figure id -> drawing function -> the cached tables it reads -> caption.

A figure module puts `@register_figure(...)` at each drawing function. `make_figure` draws any
registered figure from the cached tables it is given alone (it never trains or simulates anything),
and workflow/rules/figures.smk generates one Snakemake rule per figure of `list_figures(cfg)`, whose
input is `Figure.tables(P)` and output `Figure.outputs(P)` of the DAG's layout `P`.

A figure's id is `<paper>/<id>`, its id the paper's (`f3a_...`, `t1_...`) where the paper has
it; it writes `paper_figures/{scale}/<paper>/<id>.png`, `.pdf` and `.csv` (the numbers drawn).
Every figure carries a footer with the scale, the config's name and hash and the git commit taken
from the manifests of the tables it draws, so a tiny-scale figure can never pass for a paper-scale one.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sparserl.core.artifacts import atomic_write_bytes, atomic_write_text, config_hash, git_commit, read_manifest, read_table
from sparserl.core.paths import Paths


class FigureError(Exception):
    """A figure that cannot be drawn: unknown id, a config that has no such figure, missing tables."""


class MissingTableError(FigureError, FileNotFoundError):
    """A cached table of a figure is not on disk."""


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported at the first drawing: listing the figures
    (Snakemake does it on every parse) needs no matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sparserl.figures.style import apply_style
    apply_style()
    return plt


def single(figsize: tuple[float, float]) -> Callable:
    """Layout of one axes of `figsize` inches."""
    return lambda data: pyplot().subplots(figsize=figsize)


def row(n: int, figsize: tuple[float, float]) -> Callable:
    """Layout of `n` axes side by side; the drawing function gets them as an array."""
    return lambda data: pyplot().subplots(1, n, figsize=figsize)


def read_single(cfg: dict, tables: list[Path]):
    """The one table of a one-table figure, as a DataFrame."""
    if len(tables) != 1:
        raise FigureError(f"expected one table, got {len(tables)}: {[str(t) for t in tables]}")
    return read_table(tables[0])


def default_frame(data):
    """The numbers a figure draws, as one DataFrame for its CSV: the table itself, a dict's "df",
    or the tables of a tuple stacked with a `part` column."""
    import pandas as pd
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, dict) and isinstance(data.get("df"), pd.DataFrame):
        return data["df"]
    if isinstance(data, (tuple, list)) and data and all(isinstance(d, pd.DataFrame) for d in data):
        return pd.concat([d.assign(part=i) for i, d in enumerate(data)], ignore_index=True)
    raise FigureError(f"no CSV for data of type {type(data).__name__}: give register_figure a frame=")


@dataclass(frozen=True)
class Figure:
    """A registered figure. Its PNG is paper_figures/{scale}/<group>/<name>.png for id '<group>/<name>'."""

    id: str
    draw: Callable[[Any, Any], None]            # draw(data, axes)
    tables: Callable[[Paths], list[Path]]       # the results layout -> the cached tables it reads
    caption: str
    layout: Callable[[Any], tuple]              # data -> (matplotlib figure, the axes draw gets)
    read: Callable[[dict, list[Path]], Any]     # (cfg, tables) -> the data layout and draw get
    built_by: str                               # the rule and command that write its tables
    unavailable: Callable[[dict], str]          # cfg -> why the config has no such figure ('' if it has)
    frame: Callable[[Any], Any] = default_frame  # data -> the DataFrame of its CSV
    note: Callable[[dict, list[Path]], str] = lambda cfg, tables: ""  # (cfg, tables) -> a footer line
    bars: str = ""  # what its error bars or bands are ('' when it draws none); the footer says it

    @property
    def group(self) -> str:
        return self.id.partition("/")[0]

    @property
    def name(self) -> str:
        return self.id.partition("/")[2]

    @property
    def rule(self) -> str:
        """The name of its generated Snakemake rule."""
        return "figure_" + self.id.replace("/", "_")

    @property
    def paper(self) -> str:
        return self.group

    def require(self, cfg: dict) -> None:
        """Raise FigureError when this config has no such figure (`unavailable`): before its
        tables are resolved, which may need the config sections it lacks."""
        why = self.unavailable(cfg)
        if why:
            raise FigureError(f"figure {self.id} is not drawn for this config: {why}")

    def output(self, P: Paths) -> Path:
        """Its PNG in the layout `P`; the PDF and the CSV lie beside it (`outputs`)."""
        return P.figure_dir(self.group) / f"{self.name}.png"

    def outputs(self, P: Paths) -> dict[str, Path]:
        png = self.output(P)
        return {"png": png, "pdf": png.with_suffix(".pdf"), "csv": png.with_suffix(".csv")}


_REGISTRY: dict[str, Figure] = {}


def register_figure(fig_id: str, *, tables: Callable[[Paths], list[Path]], caption: str, layout: Callable,
                    built_by: str, unavailable: Callable[[dict], str], read: Callable = read_single,
                    frame: Callable = default_frame, note: Callable | None = None, bars: str = "") -> Callable:
    """Decorator: register the drawing function under `fig_id` and return it unchanged, so one
    function may draw several figures (one decorator each). `tables(P)` gives the cached tables it
    reads in the results layout `P`; `frame(data)` the DataFrame of its CSV (default:
    `default_frame`); `note(cfg, tables)` a line the footer adds; `bars` what its error
    bars or bands are (every figure that draws some must say: tests/figures/test_figures.py checks)."""
    group, _, name = fig_id.partition("/")
    if not group or not name or "/" in name:
        raise ValueError(f"figure id must be '<group>/<name>', got {fig_id!r}")

    def deco(draw):
        if fig_id in _REGISTRY:
            raise ValueError(f"figure {fig_id} is registered twice")
        _REGISTRY[fig_id] = Figure(fig_id, draw, tables, caption, layout, read, built_by, unavailable, frame,
                                   note or (lambda cfg, tables: ""), bars)
        return draw

    return deco


def registered() -> list[Figure]:
    """Every registered figure, in registration order, whatever the config."""
    return list(_REGISTRY.values())


def get_figure(fig_id: str) -> Figure:
    if fig_id not in _REGISTRY:
        raise FigureError(f"unknown figure {fig_id!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[fig_id]


def list_figures(cfg: dict) -> list[Figure]:
    """The figures this config produces (study figures need basis.study_reference/oracle, RL
    figures an `rl` section)."""
    return [f for f in _REGISTRY.values() if not f.unavailable(cfg)]


def provenance(table_path, cfg: dict | None = None) -> dict:
    """scale, config hash and commit of a table, from its manifest (else from cfg and the checkout)."""
    m = read_manifest(table_path) or {}
    return {"scale": m.get("scale") or (cfg or {}).get("scale", "?"),
            "config_hash": m.get("config_hash") or (config_hash(cfg) if cfg else "?"),
            "git_commit": m.get("git_commit") or git_commit()}


def draws_error_bars(fig) -> bool:
    """Whether a drawn figure has error bars (errorbar, bar/barh with yerr/xerr) or bands
    (fill_between) on any axes."""
    from matplotlib.collections import PolyCollection
    from matplotlib.container import BarContainer, ErrorbarContainer
    for ax in fig.axes:
        if any(isinstance(c, ErrorbarContainer) or (isinstance(c, BarContainer) and c.errorbar is not None)
               for c in ax.containers):
            return True
        if any(isinstance(c, PolyCollection) and c.get_paths() for c in ax.collections):
            return True
    return False


def short_commit(commit: str) -> str:
    """A commit cut to 12 hex digits, keeping its `-dirty` mark (`git_commit`): a figure drawn
    from tables of uncommitted code must say so."""
    sha, dirty, _ = str(commit).partition("-dirty")
    return sha[:12] + ("-dirty" if dirty else "")


def footer_lines(note: str = "", bars: str = "", origin: str = "") -> int:
    """How many lines `footer` writes."""
    return 2 + bool(note) + bool(bars) + bool(origin)


def footer(fig, tables: list[Path], cfg: dict | None = None, config_name: str | None = None,
           note: str = "", bars: str = "", origin: str = "") -> None:
    """Provenance footer: from the first table's manifest, naming the config file(s) the run was
    given and the table (or counting them); `bars`: what the error bars or bands are; `origin`: the
    published tables they were restored from (`sparserl.core.published.origin_line`)."""
    pv = provenance(tables[0], cfg)
    scale = str(pv["scale"])
    head = f"scale={scale}" + ("" if scale == "paper" else f"  [{scale.upper()} SCALE: not paper numbers]")
    commit = short_commit(pv["git_commit"])
    if len(tables) == 1:
        what = f"table {Path(tables[0]).name}"
    else:
        # runs resumed or redone under other code show it here rather than hiding behind the first
        others = {short_commit(provenance(t, cfg)["git_commit"]) for t in tables[1:]} - {commit}
        commit += f" (+{len(others)} other commits)" if others else ""
        what = f"{len(tables)} tables: {', '.join(sorted({Path(t).name for t in tables}))}"
    name = f"{config_name} " if config_name else ""
    text = (f"{head}\nconfig {name}({pv['config_hash']}) · commit {commit} · {what}" + (f"\n{note}" if note else "")
            + (f"\nerror bars / bands: {bars}" if bars else "") + (f"\n{origin}" if origin else ""))
    fig.text(0.01, 0.005, text, fontsize=6.5, color="0.35", ha="left", va="bottom")


def make_figure(fig_id: str, cfg: dict, tables: list, out: str | Path, config_name: str | None = None,
                origin: str = "") -> Path:
    """Draw a registered figure from `tables` (its cached tables, `Figure.tables(P)` in the DAG)
    and write its PNG `out`, the PDF and CSV beside it, atomically. `origin`: the footer's line
    on published tables (`sparserl.core.published.origin_line` of the results tree). Returns the PNG."""
    f = get_figure(fig_id)
    f.require(cfg)
    tables = [Path(t) for t in tables]
    missing = [t for t in tables if not t.exists()]
    if missing:
        listed = ", ".join(str(t) for t in missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise MissingTableError(f"figure {fig_id} reads cached tables that are missing: {listed}; "
                                f"{f.built_by} writes them (`snakemake {missing[0]}` with this config)")
    data = f.read(cfg, tables)
    csv = f.frame(data).to_csv(index=False)
    fig, axes = f.layout(data)
    try:  # a drawing that fails on a malformed table must not leave its figure open
        f.draw(data, axes)
        note = f.note(cfg, tables)
        # the footer's lines (~0.12 in each at 6.5 pt) below the axes, whatever the figure's height
        bottom = (0.06 + 0.12 * footer_lines(note, f.bars, origin)) / fig.get_figheight()
        fig.tight_layout(rect=(0, min(bottom, 0.3), 1, 1))
        footer(fig, tables, cfg, config_name, note, f.bars, origin)
        png, pdf = io.BytesIO(), io.BytesIO()
        fig.savefig(png, format="png", dpi=130)
        # no creation date: the same tables give the same bytes
        fig.savefig(pdf, format="pdf", metadata={"CreationDate": None})
    finally:
        pyplot().close(fig)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out.with_suffix(".pdf"), pdf.getvalue())
    atomic_write_text(out.with_suffix(".csv"), csv)
    atomic_write_bytes(out, png.getvalue())
    return out
