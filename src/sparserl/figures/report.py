"""The Snakemake report's entries for the registered figures: caption files, categories, labels.

`snakemake --report report.html` puts every output flagged with `report(...)` into one HTML file
(workflow/rules/figures.smk flags each figure's PNG). Snakemake takes a caption only as a file of
reStructuredText (which it first renders as a Jinja template), so the registry's captions are
written, at parse time, to `results/{scale}/report/<config hash>/<paper>/<id>.rst`, and only when
their text changed. A caption says what the figure shows (`Figure.caption`, the registry's text),
then its id, scale, config, files and the cached tables it reads. The category of an entry is its
paper (`Figure.group`), the subcategory the scale and config.
"""
from __future__ import annotations

import os
import re
import string
from pathlib import Path

from sparserl.core.artifacts import atomic_write_text, config_hash
from sparserl.core.paths import Paths
from sparserl.figures.registry import Figure

# the report's category of each figure group; a group not named here is shown by its own name
PAPERS = {"v0": "V0", "v05": "V0.5", "basis": "BASIS", "le_critique": "Le Critique",
          "head_to_head": "Head-to-head"}
_PUNCT = frozenset(string.punctuation)
MAX_LISTED_TABLES = 4  # above it the caption counts the tables and names their folders


def category(fig: Figure) -> str:
    """The report category of a figure: its paper."""
    return PAPERS.get(fig.group, fig.group)


def subcategory(cfg: dict, config_name: str) -> str:
    """The report subcategory: the scale, and the config file(s) the DAG was given."""
    return f"{cfg['scale']} scale ({config_name})" if config_name else f"{cfg['scale']} scale"


def labels(fig: Figure) -> dict[str, str]:
    """The columns of the figure's row in the report's table."""
    return {"figure": fig.name}


def rst_text(text: str) -> str:
    """`text` as plain reStructuredText: one paragraph, every ASCII punctuation character escaped
    with a backslash. A caption's `*`, `_`, backquotes or a leading `1.` stay characters (not
    emphasis, references or a list), and `{{`, `{%` no longer open Jinja, which Snakemake runs
    over a caption before docutils."""
    return "".join("\\" + c if c in _PUNCT else c for c in " ".join(str(text).split()))


def rst_literal(text: str) -> str:
    """`text` as an inline literal (a path, an id); plain text where it holds a double backquote."""
    text = " ".join(str(text).split())
    if not text or "``" in text or text.startswith("`") or text.endswith("`"):
        return rst_text(text)
    return f"``{text}``"


def _tables_line(tables: list[Path]) -> str:
    if not tables:
        return "none"
    if len(tables) <= MAX_LISTED_TABLES:
        return ", ".join(rst_literal(t) for t in tables)
    folders = sorted({str(Path(t).parent) for t in tables})
    if len(folders) > MAX_LISTED_TABLES:
        folders = [os.path.commonpath(folders) or "."]
    return f"{len(tables)} tables under " + ", ".join(rst_literal(f) for f in folders)


def caption_rst(fig: Figure, P: Paths, config_name: str = "", tables: list | None = None) -> str:
    """The caption file of a figure in the results layout `P`: the registry's caption, then a field
    list naming the figure id, the scale and config, its three files, the tables it reads
    (`tables`: its `Figure.tables(P)` if already computed) and who writes them."""
    out = fig.outputs(P)
    tables = fig.tables(P) if tables is None else tables
    config = f"{config_name}, " if config_name else ""
    fields = {
        "figure": rst_literal(fig.id),
        "scale": rst_text(f"{P.scale} (config {config}hash {config_hash(P.cfg)})"),
        "files": (rst_literal(out["png"]) + ", " + rst_literal(out["pdf"].name) + " and "
                  + rst_literal(out["csv"].name) + " " + rst_text("(the numbers drawn) beside it")),
        "reads": _tables_line([Path(t) for t in tables]),
        "tables by": rst_text(fig.built_by),
    }
    body = "\n".join(f":{k}: {v}" for k, v in fields.items())
    return f"{rst_text(fig.caption)}\n\n{body}\n"


def caption_dir(P: Paths) -> Path:
    """Where the caption files of the layout's config go (one folder per config, as its resolved file)."""
    return P.stage("report", config_hash(P.cfg))


def caption_path(fig: Figure, P: Paths) -> Path:
    return caption_dir(P) / fig.group / f"{fig.name}.rst"


def write_captions(figures: list[Figure], P: Paths, config_name: str = "",
                   tables: dict[str, list] | None = None) -> dict[str, Path]:
    """Write the caption file of every figure (only those whose text changed) and return
    figure id -> absolute path: Snakemake resolves a relative caption path against the .smk
    file's folder, not the working directory the results are in. `tables`: figure id -> its
    tables, where the caller has them (a figure's `tables(P)` can take seconds at parse time)."""
    paths = {}
    for fig in figures:
        path = caption_path(fig, P)
        text = caption_rst(fig, P, config_name, (tables or {}).get(fig.id))
        if not path.exists() or path.read_text() != text:
            atomic_write_text(path, text)
        paths[fig.id] = path.resolve()
    return paths


def report_results(html: str) -> dict[str, dict]:
    """The results a Snakemake HTML report embeds (`var results = {...};`): path -> entry with
    its caption (HTML), category labels and data URI. For the tests and perf/check_report.py."""
    import json
    m = re.search(r"<script id=\"results\">\s*var results = (.*?);\s*</script>", html, re.S)
    if not m:
        raise ValueError("not a Snakemake HTML report: no `var results = ...` script")
    return json.loads(m.group(1))


def report_categories(html: str) -> dict[str, dict[str, list[str]]]:
    """The categories a Snakemake HTML report embeds: category -> subcategory -> result paths."""
    import json
    m = re.search(r"<script id=\"categories\">\s*var categories = (.*?);\s*</script>", html, re.S)
    if not m:
        raise ValueError("not a Snakemake HTML report: no `var categories = ...` script")
    return json.loads(m.group(1))
