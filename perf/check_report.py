"""Check a Snakemake HTML report in headless Chromium: every figure of the config is in it.

    snakemake --cores 2 all && snakemake --report paper_figures/tiny/report.html
    python perf/check_report.py paper_figures/tiny/report.html --config configs/tiny.yaml \
        [--screenshot report.png] [--show basis/f3a_mse_by_method] [--chromium PATH]

The report is a React app: its results are embedded as JSON (`var results`, `var categories`) and
drawn by JavaScript only when a category is opened. So the check runs in two parts.
1. The embedded data: every figure of `list_figures(cfg)` has its PNG in `results`, under its
   paper's category and the config's subcategory, with its registry caption (rendered by
   docutils) and an image data URI.
2. The browser: a copy of the report gets a probe script that uses the app as a reader does. It
   clicks each category (and subcategory) in the menu, reads the rows the app rendered, opens each
   row's info panel (the caption as shown) and its image (decoded: width > 0), and writes what it
   saw into the DOM. `chromium --headless --dump-dom --virtual-time-budget` runs it; then every
   figure must have been listed by name, captioned and shown. `--screenshot` takes a second run
   that ends on one figure (`--show`, default the first) with its category listed beside it.

Needs Chromium (Debian: `apt-get install -y chromium`); tests/figures/test_report.py checks part 1 without it.
Exit status 0 when every figure passed, 1 otherwise (the failures are printed).
"""
from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout

from sparserl.core.config import load_config  # noqa: E402
from sparserl.figures import list_figures  # noqa: E402
from sparserl.figures import report as figure_report  # noqa: E402

# Drives the app through its menu as a reader would, and records what it rendered.
PROBE = r"""
<script id="sparserl-probe-script">
(async function () {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const out = { menu: [], rows: [], errors: [] };
  const nav = () => document.querySelector("nav");
  const text = (el) => (el ? el.textContent.replace(/\s+/g, " ").trim() : "");
  const click = (root, label) => {
    for (const a of root.querySelectorAll("a")) if (text(a) === label) { a.click(); return true; }
    return false;
  };
  // read first: clicking the app's links (href="#") clears the hash
  const show = decodeURIComponent(location.hash.replace(/^#show=/, ""));
  const single = Object.keys(categories).length === 1;  // then the menu says "Results"
  const openSub = async (cat, sub) => {
    app.setView({ navbarMode: "menu", content: "text", contentText: " " }); await sleep(30);
    if (!click(nav(), single ? "Results" : cat)) throw new Error("no menu entry " + cat);
    await sleep(30);
    if (Object.keys(categories[cat]).length > 1) {
      if (!click(nav(), sub)) throw new Error("no subcategory entry " + sub);
      await sleep(30);
    }
    return Array.from(nav().querySelectorAll("tbody tr"));
  };
  // the image in the content pane (outside the menu), decoded, and the result it belongs to
  const shownImage = async () => {
    await sleep(30);
    const img = Array.from(document.querySelectorAll("#app img")).find((i) => !i.closest("nav"));
    if (!img) return { path: null, width: 0 };
    const src = img.getAttribute("src");
    const path = Object.keys(results).find((p) => results[p].data_uri === src) || null;
    // poll, not img.decode(): under a virtual time budget decode() may never settle
    for (let i = 0; i < 100 && !(img.complete && img.naturalWidth > 0); i++) await sleep(20);
    return { path: path, width: img.complete ? img.naturalWidth : 0 };
  };
  try {
    for (let i = 0; i < 200 && !(nav() && text(nav()).includes(single ? "Results" : Object.keys(categories)[0])); i++) await sleep(50);
    out.menu = Array.from(nav().querySelectorAll("li")).map(text);
    for (const cat of Object.keys(categories)) {
      for (const sub of Object.keys(categories[cat])) {
        const n = (await openSub(cat, sub)).length;
        for (let i = 0; i < n; i++) {
          let row = (await openSub(cat, sub))[i];
          const cells = Array.from(row.querySelectorAll("td")).map(text);
          row.querySelectorAll("a")[0].click();  // the eye: the image in the content pane
          const shown = await shownImage();
          row = nav().querySelectorAll("tbody tr")[i];
          const buttons = row.querySelectorAll("a");
          buttons[buttons.length - 1].click();  // (i): the result's info panel
          await sleep(30);
          out.rows.push({ category: cat, subcategory: sub, cells: cells, info: text(nav()),
                          image_path: shown.path, image_width: shown.width });
        }
      }
    }
    // end on one figure, its category listed beside it (what --screenshot captures)
    const first = Object.values(Object.values(categories)[0])[0][0];
    const target = show in results ? show : first;
    for (const cat of Object.keys(categories)) for (const sub of Object.keys(categories[cat])) {
      if (categories[cat][sub].includes(target)) {
        await openSub(cat, sub);
        app.setView({ content: "img", contentPath: results[target].data_uri, resultPath: target });
        const shown = await shownImage();
        out.shown = shown.path; out.shown_width = shown.width;
      }
    }
  } catch (e) { out.errors.push(String((e && e.stack) || e)); }
  const pre = document.createElement("pre");
  pre.id = "sparserl-probe"; pre.style.display = "none";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
  document.title = "sparserl-probe-done";
})();
</script>
"""


def find_chromium(given: str | None) -> str:
    for name in ([given] if given else ["chromium", "chromium-browser", "google-chrome", "chrome"]):
        path = shutil.which(name) if name else None
        if path:
            return path
    raise SystemExit("no Chromium found: install it (Debian: apt-get install -y chromium) or pass --chromium PATH")


def chromium(binary: str, page: Path, *args: str, budget_ms: int, hash_: str = "", timeout: float = 300) -> str:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--window-size=1600,1000", f"--virtual-time-budget={budget_ms}", *args,
           page.resolve().as_uri() + hash_]
    with tempfile.TemporaryDirectory() as profile:  # a fresh profile: no state between runs
        out = subprocess.run([*cmd, f"--user-data-dir={profile}"], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"chromium failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-3000:]}")
    return out.stdout


def norm(s: str) -> str:
    return " ".join(s.split())


def check_embedded(page: str, figures, cfg: dict, config_name: str) -> list[str]:
    """Part 1: the report's embedded data names every figure, with its category and caption."""
    results = figure_report.report_results(page)
    categories = figure_report.report_categories(page)
    sub = figure_report.subcategory(cfg, config_name)
    bad = []
    for f in figures:
        path = str(f.output(cfg))
        entry = results.get(path)
        if entry is None:
            bad.append(f"{f.id}: {path} not in the report")
            continue
        caption = norm(html.unescape(re.sub(r"<[^>]+>", " ", entry["caption"])))
        if norm(f.caption) not in caption or f.id not in caption:
            bad.append(f"{f.id}: the caption in the report is not the registry's: {caption[:200]!r}")
        if path not in categories.get(figure_report.category(f), {}).get(sub, []):
            bad.append(f"{f.id}: not under category {figure_report.category(f)!r} / {sub!r}")
        if not (entry["data_uri"].startswith("data:image/png;") and ";base64," in entry["data_uri"]):
            bad.append(f"{f.id}: no embedded PNG")
    return bad


def check_browser(dom: str, figures, cfg: dict, config_name: str) -> tuple[list[str], dict]:
    """Part 2: what the app rendered in Chromium names, captions and shows every figure."""
    m = re.search(r'<pre id="sparserl-probe"[^>]*>(.*?)</pre>', dom, re.S)
    if not m:
        return ["the probe did not finish inside the virtual time budget (raise --budget)"], {}
    probe = json.loads(html.unescape(m.group(1)))
    bad = [f"probe error: {e}" for e in probe["errors"]]
    sub = figure_report.subcategory(cfg, config_name)
    rows = {(r["category"], r["subcategory"], r["cells"][0] if r["cells"] else ""): r for r in probe["rows"]}
    for f in figures:
        if len({figure_report.category(g) for g in figures}) > 1 and figure_report.category(f) not in probe["menu"]:
            bad.append(f"{f.id}: the menu has no entry {figure_report.category(f)!r}: {probe['menu']}")
        row = rows.get((figure_report.category(f), sub, f.name))
        if row is None:
            bad.append(f"{f.id}: no row {f.name!r} rendered under {figure_report.category(f)!r} / {sub!r}")
            continue
        if norm(f.caption) not in norm(row["info"]):
            bad.append(f"{f.id}: its info panel does not show the registry caption")
        if row["image_path"] != str(f.output(cfg)) or not row["image_width"]:
            bad.append(f"{f.id}: its eye button showed {row['image_path']} ({row['image_width']} px wide), "
                       f"not its PNG decoded")
    return bad, probe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", type=Path, help="the report.html `snakemake --report` wrote")
    ap.add_argument("--config", nargs="+", default=["configs/tiny.yaml"],
                    help="the config file(s) the report was built with (default configs/tiny.yaml)")
    ap.add_argument("--screenshot", type=Path, help="also save a screenshot of the report showing one figure")
    ap.add_argument("--show", help="figure id the screenshot shows (default: the first)")
    ap.add_argument("--chromium", help="the Chromium binary (default: chromium on PATH)")
    ap.add_argument("--budget", type=int, default=120_000, help="virtual time budget, ms (default 120000)")
    ap.add_argument("--only-drawn", action="store_true",
                    help="check only the figures whose PNG is on disk (a report built for some figures "
                         "as targets); by default every figure of the config must be in the report")
    args = ap.parse_args(argv)

    cfg = load_config(args.config)
    config_name = "+".join(os.path.basename(c) for c in args.config)
    figures = list_figures(cfg)
    if args.only_drawn:
        skipped = [f.id for f in figures if not f.output(cfg).exists()]
        figures = [f for f in figures if f.output(cfg).exists()]
        print(f"--only-drawn: {len(skipped)} figures of the config not drawn, not checked: {', '.join(skipped)}")
    if not figures:
        raise SystemExit("no figures to check")
    page = args.report.read_text(encoding="utf-8")
    bad = check_embedded(page, figures, cfg, config_name)
    print(f"embedded data: {len(figures)} figures of {config_name}, {len(bad)} problems")

    binary = find_chromium(args.chromium)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        probe_page = Path(tmp) / "report_probe.html"
        end = page.rfind("</body>")  # the last: the embedded libraries' code holds the string too
        if end < 0:
            raise SystemExit(f"{args.report}: no </body>: not an HTML report")
        probe_page.write_text(page[:end] + PROBE + page[end:], encoding="utf-8")
        t0 = time.time()
        dom = chromium(binary, probe_page, "--dump-dom", budget_ms=args.budget)
        took = time.time() - t0
        browser_bad, probe = check_browser(dom, figures, cfg, config_name)
        bad += browser_bad
        print(f"browser ({version}, {took:.1f} s): menu {probe.get('menu')}")
        for r in probe.get("rows", []):
            print(f"  {r['category']:<14} {r['subcategory']:<26} {' | '.join(r['cells']):<34} "
                  f"image {r['image_width']} px wide, caption {'shown' if len(r['info']) > 40 else 'MISSING'}")
        if args.screenshot:
            show = str(next((f.output(cfg) for f in figures if f.id == args.show), figures[0].output(cfg)))
            args.screenshot.parent.mkdir(parents=True, exist_ok=True)
            dom = chromium(binary, probe_page, "--dump-dom", f"--screenshot={args.screenshot.resolve()}",
                           budget_ms=args.budget, hash_="#show=" + show)
            m = re.search(r'<pre id="sparserl-probe"[^>]*>(.*?)</pre>', dom, re.S)
            shown = json.loads(html.unescape(m.group(1))) if m else {}
            if shown.get("shown") != show or not shown.get("shown_width") or not args.screenshot.exists():
                bad.append(f"screenshot: showed {shown.get('shown')} ({shown.get('shown_width')} px wide), not {show}")
            print(f"screenshot of {shown.get('shown')} ({shown.get('shown_width')} px wide) beside its "
                  f"category's list: {args.screenshot}")
    for b in bad:
        print("FAIL", b)
    ok = not bad
    print(f"{'OK' if ok else 'FAILED'}: {len(figures) - len({b.split(':')[0] for b in bad})}/{len(figures)} "
          f"figures named, captioned and shown in {args.report}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
