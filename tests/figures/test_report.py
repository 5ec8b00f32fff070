"""The Snakemake report and the figure registry's promises: every registered figure has a caption,
a generated rule in some config's DAG and a CSV beside its PNG and PDF; `snakemake --report`
builds and names every figure of the config with its caption, paper and scale (read from the
report's embedded data: perf/check_report.py does the same in headless Chromium), and holds the
claims table and the head-to-head ranking as HTML tables, not only figures."""
import functools
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sparserl.cli.figures import draw_figure
from sparserl.core.artifacts import write_table
from sparserl.core.config import ConfigError, load_config
from sparserl.core.paths import Paths
from sparserl.figures import list_figures, registered
from sparserl.figures import report as figure_report


def snakemake(repo, workdir, *args, timeout=300):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout)


@functools.lru_cache(maxsize=1)
def config_choices(repo) -> dict[tuple[str, ...], dict]:
    """Every config of configs/, alone and with each overlay it accepts."""
    bases = sorted(p for p in (repo / "configs").glob("*.yaml") if p.name != "schema.yaml")
    out = {}
    for base in bases:
        out[(str(base),)] = load_config([str(base)])
        for overlay in sorted((repo / "configs" / "overlays").glob("*.yaml")):
            try:
                out[(str(base), str(overlay))] = load_config([str(base), str(overlay)])
            except ConfigError:
                continue
    return out


SCALES = ["smoke", "tiny", "small", "paper"]  # cheapest to parse first (small's parse takes 20 s)


def covering_configs(repo) -> list[tuple[tuple[str, ...], dict]]:
    """A few configs that, together, list every registered figure (greedy: the smallest scale
    that adds figures, then the most figures)."""
    choices, todo, chosen = dict(config_choices(repo)), {f.id for f in registered()}, []
    while todo:
        gains = {k: todo & {f.id for f in list_figures(c)} for k, c in choices.items()}
        useful = [k for k, g in gains.items() if g]
        assert useful, f"figures no config of configs/ draws (no rule is ever generated for them): {sorted(todo)}"
        rank = {k: (SCALES.index(choices[k]["scale"]) if choices[k]["scale"] in SCALES else len(SCALES),
                    -len(gains[k]), len(k)) for k in useful}
        files = min(useful, key=rank.get)
        chosen.append((files, choices[files]))
        todo -= gains[files]
    return chosen


def plain(caption_html: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", caption_html)).split())


def render_caption(rst: str) -> str:
    """What Snakemake does with a caption file: Jinja, then docutils (failing on any warning)."""
    from docutils.core import publish_parts
    from jinja2 import Environment
    text = Environment(trim_blocks=True, lstrip_blocks=True).from_string(rst).render(snakemake=None)
    return publish_parts(text, writer="html", settings_overrides={"halt_level": 2, "report_level": 5})["body"]


@pytest.mark.e2e  # every figure, ~8 s
def test_every_registered_figure_has_a_caption_and_three_files(repo):
    figs = registered()
    assert figs and len({f.id for f in figs}) == len(figs)
    # each figure with a config that draws it
    drawn = {f.id: (files, cfg) for files, cfg in reversed(covering_configs(repo)) for f in list_figures(cfg)}
    captions = []
    for f in figs:
        files, cfg = drawn[f.id]
        name = "+".join(Path(p).name for p in files)
        assert f.caption.strip() and len(f.caption.split()) >= 5, f"{f.id}: caption {f.caption!r} says nothing"
        out = f.outputs(Paths(cfg))
        assert set(out) == {"png", "pdf", "csv"} and len({p.parent for p in out.values()}) == 1, f.id
        assert [p.suffix for p in out.values()] == [".png", ".pdf", ".csv"] and out["png"].stem == f.name
        captions.append(figure_report.caption_rst(f, Paths(cfg), name))
    # each caption file renders (Jinja, then docutils, no warning) to the registry's text; one
    # document for all (a docutils run per caption takes 0.2 s)
    bodies = render_caption("\n\nFIGURE-BREAK\n\n".join(captions)).split("<p>FIGURE-BREAK</p>")
    assert len(bodies) == len(figs)
    for f, body in zip(figs, bodies):
        files, cfg = drawn[f.id]
        name = "+".join(Path(p).name for p in files)
        assert " ".join(f.caption.split()) in plain(body) and f.id in plain(body), f.id
        assert f"{cfg['scale']} (config {name}, hash " in plain(body) and figure_report.category(f)


def test_caption_text_is_escaped_for_jinja_and_rst():
    nasty = "1. *not bold* `code` name_ |sub| {{ snakemake.x }} {% if %} \\ back <b>&</b> :role:`x`"
    body = render_caption(figure_report.rst_text(nasty))
    assert plain(body) == " ".join(nasty.split())
    assert "<em>" not in body and "<ol" not in body and "<b>" not in body
    assert figure_report.rst_literal("a/b_c.png") == "``a/b_c.png``"


def test_caption_files_are_written_only_when_changed(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config([str(repo / "configs/smoke.yaml")])
    figs = list_figures(cfg)
    paths = figure_report.write_captions(figs, Paths(cfg), "smoke.yaml")
    assert set(paths) == {f.id for f in figs} and all(p.is_absolute() and p.exists() for p in paths.values())
    assert paths[figs[0].id] == (tmp_path / figure_report.caption_path(figs[0], Paths(cfg))).resolve()
    stamps = {k: p.stat().st_mtime_ns for k, p in paths.items()}
    os.utime(paths[figs[0].id], ns=(1, 1))  # so a rewrite would show
    stamps[figs[0].id] = 1
    figure_report.write_captions(figs, Paths(cfg), "smoke.yaml")
    assert {k: p.stat().st_mtime_ns for k, p in paths.items()} == stamps
    figure_report.write_captions(figs, Paths(cfg), "smoke.yaml+other.yaml")  # new text: rewritten
    assert paths[figs[0].id].stat().st_mtime_ns != 1
    assert "config smoke.yaml+other.yaml," in plain(render_caption(paths[figs[0].id].read_text()))


@pytest.mark.e2e  # DAG rule listings
def test_every_registered_figure_has_a_generated_rule(repo, tmp_path):
    """The configs of configs/ together draw every registered figure, and each config's parsed
    workflow has exactly one figure rule per figure of that config."""
    for files, cfg in covering_configs(repo):
        args = ["--configfile", *files]
        work = tmp_path / "-".join(Path(f).stem for f in files)
        out = snakemake(repo, work, "--list-rules", *args)
        assert out.returncode == 0, out.stderr[-3000:]
        rules = set(re.findall(r"^(figure_\w+)", out.stdout, re.M))
        assert rules == {f.rule for f in list_figures(cfg)}, (files, rules ^ {f.rule for f in list_figures(cfg)})


@pytest.mark.e2e  # DAG dry run
def test_smoke_dag_has_a_job_per_figure_writing_png_pdf_and_csv(repo, tmp_path):
    smoke = str(repo / "configs/smoke.yaml")
    cfg = load_config([smoke])
    out = snakemake(repo, tmp_path, "all", "-n", "--cores", "1", "--configfile", smoke)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    for f in list_figures(cfg):
        block = log.split(f"rule {f.rule}:\n")[1].split("\n\n")[0]
        o = f.outputs(Paths(cfg))
        assert f"output: {o['png']}, {o['pdf']}, {o['csv']}" in block, block


def test_a_drawn_figure_has_its_csv_beside_png_and_pdf(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = yaml.safe_load((repo / "configs/smoke.yaml").read_text())
    table = pd.DataFrame({"method": ["basis_unb", "reinforce_pp", "grpo"], "mse": [0.02, 0.06, 0.03],
                          "mse_se": [0.002] * 3, "pct_vs_reinforce_pp": [-66.0, 0.0, -50.0]})
    write_table(table, Paths(cfg).figure_dir("basis") / "mse_by_method.parquet", cfg=cfg)
    png = draw_figure("basis/f3a_mse_by_method", cfg, Paths(cfg))
    out = registered()[[f.id for f in registered()].index("basis/f3a_mse_by_method")].outputs(Paths(cfg))
    assert png == out["png"] and png.read_bytes()[:4] == b"\x89PNG"
    assert out["pdf"].read_bytes()[:5] == b"%PDF-"
    pd.testing.assert_frame_equal(pd.read_csv(out["csv"]), table)


def fake_png(path: Path) -> None:
    import matplotlib.image
    import numpy as np
    path.parent.mkdir(parents=True, exist_ok=True)
    matplotlib.image.imsave(path, np.zeros((4, 6, 3)))


def fake_claims_page(root: Path, cfg: dict) -> Path:
    """A stand-in CLAIMS.html (the report reads only the files flagged for it)."""
    from sparserl.studies.claims import html_path
    path = root / html_path(Paths(cfg).claims_md())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("<html><body><table><tr><td>v05.osla_vs_grpo16</td></tr></table></body></html>\n")
    return path


def html_entry(results: dict, path: Path, root: Path) -> str:
    """The report entry of an HTML table: it is embedded as HTML (shown inline), holding the file."""
    import base64
    entry = results[str(path.relative_to(root))]
    assert entry["mime_type"] == "text/html", entry["mime_type"]
    data = base64.b64decode(entry["data_uri"].split(";base64,", 1)[1]).decode()
    assert data == path.read_text()
    return plain(entry["caption"])


@pytest.mark.e2e  # snakemake --report
def test_report_builds_and_names_every_figure(repo, tmp_path):
    """`snakemake --report` on a tree holding the smoke config's figure PNGs (stand-ins: the
    report reads only the files flagged for it) names every figure, under its paper and the
    scale/config, with its caption from the registry; the claims table is in it as HTML."""
    smoke = str(repo / "configs/smoke.yaml")
    cfg = load_config([smoke])
    figs = list_figures(cfg)
    for f in figs:
        fake_png(tmp_path / f.output(Paths(cfg)))
    claims = fake_claims_page(tmp_path, cfg)
    report = tmp_path / "report.html"
    out = snakemake(repo, tmp_path, "--report", str(report), "--configfile", smoke)
    assert out.returncode == 0, out.stderr[-3000:]
    page = report.read_text()
    results = figure_report.report_results(page)
    categories = figure_report.report_categories(page)
    sub = figure_report.subcategory(cfg, "smoke.yaml")
    assert sub == "smoke scale (smoke.yaml)"
    for f in figs:
        entry = results[str(f.output(Paths(cfg)))]
        assert " ".join(f.caption.split()) in plain(entry["caption"]), f.id
        assert f.id in plain(entry["caption"]) and "smoke (config smoke.yaml" in plain(entry["caption"])
        assert str(f.output(Paths(cfg))) in categories[figure_report.category(f)][sub]
        assert entry["labels"] == {"figure": f.name} and entry["job_properties"]["rule"] == f.rule
        assert entry["data_uri"].startswith("data:image/png;") and ";base64," in entry["data_uri"]
    assert {figure_report.category(f) for f in figs} <= set(categories)
    caption = html_entry(results, claims, tmp_path)
    assert "direction only" in caption and "magnitude status" in caption
    assert categories["Claims"][sub] == [str(claims.relative_to(tmp_path))]
    # the global description (workflow/report/workflow.rst), rendered with the config's scale
    desc = re.search(r"var workflow_desc = (.*?);\s*</script>", page, re.S).group(1)
    assert "sparserl: smoke scale" in plain(desc)


@pytest.mark.e2e  # snakemake --report
def test_report_holds_the_ranking_table(repo, tmp_path, monkeypatch):
    """At a scale with RL runs the head-to-head ranking is in the report as a table, beside the
    head-to-head figures: `sparserl ranking-html` renders the cached ranking.parquet (here a
    synthetic one) and `snakemake --report` embeds the page."""
    from sparserl.cli import main
    from sparserl.studies.report_tables import RANKING_COLUMNS
    monkeypatch.chdir(tmp_path)
    tiny = str(repo / "configs/tiny.yaml")
    cfg = load_config([tiny])
    ranking = pd.DataFrame({"rank": [1, 1, 3], "tie_group": ["a", "a", "b"], "method": ["v05_k4", "grpo_g4", "x<y>"],
                            "family": ["v05", "group", "group"], "seeds": [1, 1, 1], "rollouts_total": [512.0] * 3,
                            "wall_time_s": [10.0, 9.0, 8.0], "accuracy": [0.5, 0.5, 0.3], "ci_lo": [0.45, 0.44, 0.25],
                            "ci_hi": [0.55, 0.56, 0.35], "ci_method": "bootstrap", "ties_with": ["grpo_g4", "v05_k4", ""]})
    assert list(ranking.columns) == list(RANKING_COLUMNS)
    write_table(ranking, Paths(cfg).head_to_head("ranking"), cfg=cfg)
    table = Paths(cfg).head_to_head("ranking").with_suffix(".html")
    assert main(["ranking-html", "--config", tiny, "--out", str(table)]) == 0
    page = table.read_text()
    assert page.count("<tr>") == 4 and "<td>x&lt;y&gt;</td>" in page and "[0.450, 0.550]" in page
    assert "TINY SCALE: not paper numbers" in page and "tie group" in page
    write_table(ranking.drop(columns="tie_group"), Paths(cfg).head_to_head("ranking"), cfg=cfg)
    with pytest.raises(SystemExit, match=r"ranking.parquet: no column\(s\) \['tie_group'\]"):
        main(["ranking-html", "--config", tiny, "--out", str(table.with_name("bad.html"))])
    for f in list_figures(cfg):
        fake_png(tmp_path / f.output(Paths(cfg)))
    fake_claims_page(tmp_path, cfg)
    out = snakemake(repo, tmp_path, "--report", str(tmp_path / "report.html"), "--configfile", tiny)
    assert out.returncode == 0, out.stderr[-3000:]
    page = (tmp_path / "report.html").read_text()
    results = figure_report.report_results(page)
    caption = html_entry(results, tmp_path / table, tmp_path)
    assert "head-to-head ranking" in caption and "tie-group letter" in caption
    entry = results[str(table)]
    assert entry["labels"] == {"figure": "ranking table"} and entry["job_properties"]["rule"] == "head_to_head"
    sub = figure_report.subcategory(cfg, "tiny.yaml")
    assert str(table) in figure_report.report_categories(page)["Head-to-head"][sub]


@pytest.mark.e2e  # snakemake --report
def test_report_fails_when_a_figure_is_missing(repo, tmp_path):
    """A report needs every figure drawn: it names the missing PNG instead of leaving it out."""
    smoke = str(repo / "configs/smoke.yaml")
    cfg = load_config([smoke])
    figs = list_figures(cfg)
    for f in figs[1:]:
        fake_png(tmp_path / f.output(Paths(cfg)))
    fake_claims_page(tmp_path, cfg)
    out = snakemake(repo, tmp_path, "--report", str(tmp_path / "r.html"), "--configfile", smoke)
    assert out.returncode != 0 and str(figs[0].output(Paths(cfg))) in out.stdout + out.stderr
