"""`python -m sparserl published pack|status|rebuild|verify|resume <scale>`: the tables the figures, the
ranking, the head-to-head and the claims read, as data in the repo (`published/<scale>/`).

    sparserl published pack small --results ../sweep/results/small   # add a finished shard's tables
    sparserl published status small                                    # what is published, stale, missing
    sparserl published rebuild small                                   # figures, ranking, CLAIMS.md, RESULTS.md; no training
    sparserl published verify small grpo_g16/seed0                     # rerun one run here, compare
    sparserl published resume small --tree ../sweep                    # a wiped sweep worktree goes on

Which tables: a dry run of the config's whole DAG (`snakemake -n --forceall all`) names every job;
the *rebuild rules* (each figure's rule, claims, head_to_head, head_to_head_aggregates, reading,
rl_summary, world_compare: seconds from cached tables) are what `rebuild` runs, and what they read, less what
they make themselves, is what `pack` publishes, with the tables their producing job writes beside
them undeclared (a run's per-checkpoint and per-problem evaluations), and the learning-rate tuning's
tables (`PUBLISHED_OUTPUT_RULES`). Weights never are.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparserl.core import published as pub
from sparserl.core.config import setting

REPO = Path(__file__).resolve().parents[3]  # src/sparserl/cli/published.py -> the checkout
# the config files of each scale's published sweep (another: --configfile)
SCALE_CONFIGS = {"tiny": ["configs/tiny.yaml"], "small": ["configs/small.yaml", "configs/overlays/small_v0.yaml"]}
# rules that derive tables and figures from cached tables in seconds: rebuild runs them, pack
# publishes what they read
REBUILD_RULES = ("claims", "head_to_head", "head_to_head_aggregates", "reading", "rl_summary", "world_compare")
# rules whose tables are published though no rebuild rule reads them: the learning-rate tuning's
# table and its spread over rates and seeds are published data: they show how the rates were chosen
PUBLISHED_OUTPUT_RULES = ("lr_tune_run", "lr_tuning")


def is_rebuild_rule(rule: str) -> bool:
    return rule in REBUILD_RULES or rule.startswith("figure_")


@dataclass
class Job:
    rule: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def _files(line: str) -> list[str]:
    return [f.strip() for f in line.split(", ") if f.strip()]


def parse_jobs(text: str) -> list[Job]:
    """Jobs of `snakemake -n` output, with their input and output files."""
    jobs = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n)|\n\n", text):
        m = re.search(r"^(?:local)?(?:rule|checkpoint) ([\w/]+):$", block, re.M)
        if not m:
            continue
        job = Job(m.group(1))
        for line in block.splitlines():
            s = line.strip()
            if s.startswith("input: "):
                job.inputs = _files(s[len("input: "):])
            elif s.startswith("output: "):
                job.outputs = _files(s[len("output: "):])
        jobs.append(job)
    return jobs


def snakemake_cmd(configfiles: list[str], workdir: str | Path, *args: str, tree: Path = REPO) -> list[str]:
    """Snakemake on `tree`'s Snakefile and config files (a pinned sweep's own checkout, or this one)."""
    return [sys.executable, "-m", "snakemake", "-s", str(tree / "Snakefile"), "-d", str(workdir),
            "--configfile", *[str(tree / c) if not Path(c).is_absolute() else c for c in configfiles], *args]


def dag_jobs(configfiles: list[str], outputs: bool = True, tree: Path = REPO) -> tuple[list[Job], set[str]]:
    """Every job of the config's `all` as a dry run plans it in an empty scratch folder (nothing there
    is read), and (`outputs`) every file any job makes (`--detailed-summary`: a dry run prints a job
    with a `message`, such as rl_train, without its files)."""
    with tempfile.TemporaryDirectory(prefix="sparserl-published-dag-") as work:
        runs = {"summary": ""}
        for what, extra in (("dry run", ("-n", "--forceall")), ("summary", ("--detailed-summary",)))[:1 + outputs]:
            out = subprocess.run(snakemake_cmd(configfiles, work, *extra, "all", tree=tree), cwd=tree,
                                 capture_output=True, text=True, timeout=1800)
            if out.returncode:
                raise SystemExit(f"sparserl published: the {what} of {' '.join(configfiles)} failed:\n"
                                 + out.stderr[-3000:])
            runs[what] = out.stdout + "\n" + out.stderr
    jobs = parse_jobs(runs["dry run"])
    made = {line.split("\t")[0] for line in runs["summary"].splitlines()[1:] if line.count("\t") >= 7}
    if not any(is_rebuild_rule(j.rule) for j in jobs):
        raise SystemExit(f"sparserl published: the dry run of {' '.join(configfiles)} planned no figure, "
                         "claims or head-to-head job; is it a config with those stages?")
    return jobs, made


@dataclass
class Plan:
    """What the config's DAG publishes and how it rebuilds."""
    needed: list[str]            # workdir-relative inputs of the rebuild jobs that no rebuild job makes
    declared: set[str]           # every file of any job (a companion is none of these)
    rebuild: list[Job]           # the rebuild jobs


def plan(dag: tuple[list[Job], set[str]]) -> Plan:
    jobs, outputs = dag
    rebuild = [j for j in jobs if is_rebuild_rule(j.rule)]
    made = {o for j in rebuild for o in j.outputs}
    kept = {o for j in jobs if j.rule in PUBLISHED_OUTPUT_RULES for o in j.outputs}
    needed = sorted(({i for j in rebuild for i in j.inputs} - made) | kept)
    declared = {f for j in jobs for f in j.inputs + j.outputs} | outputs
    return Plan(needed, declared, rebuild)


@dataclass
class Setup:
    scale: str
    configfiles: list[str]
    cfg: dict
    root: Path                   # published/<scale>/

    @property
    def results_dir(self) -> str:
        return setting(self.cfg, "results_dir")

    @property
    def figures_dir(self) -> str:
        return setting(self.cfg, "figures_dir")

    def key(self, rel: str) -> str | None:
        return pub.to_key(rel, self.results_dir, self.figures_dir, self.scale)

    def rel(self, key: str) -> str:
        return pub.from_key(key, self.results_dir, self.figures_dir, self.scale)


def setup(args) -> Setup:
    import sparserl.engines.openrlhf.placement  # noqa: F401  (registers its check of rl.openrlhf)
    from sparserl.core.config import load_config
    root = Path(args.published or REPO / "published") / args.scale
    index = pub.read_index(root)
    files = args.configfile or index.get("configfiles") or SCALE_CONFIGS.get(args.scale)
    if not files:
        raise SystemExit(f"sparserl published: no config files known for scale {args.scale!r}; give "
                         f"--configfile (known scales: {', '.join(SCALE_CONFIGS)})")
    cfg = load_config([REPO / f if not Path(f).is_absolute() else f for f in files])
    if cfg["scale"] != args.scale:
        raise SystemExit(f"sparserl published: {' '.join(files)} is scale {cfg['scale']!r}, not {args.scale!r}; "
                         "give the scale's config files with --configfile")
    return Setup(args.scale, list(files), cfg, root)


# --------------------------------------------------------------------------------------------- pack

def companions(src_root: Path, rel: str, declared: set[str]) -> list[str]:
    """Tables the job that wrote `rel` wrote beside it without declaring them (each with a manifest):
    in its folder, and in the folder named after it (eval.parquet -> eval/)."""
    here = src_root / rel
    out = []
    for folder, deep in ((here.parent, False), (here.parent / here.name.split(".")[0], True)):
        if not folder.is_dir() or folder == here:
            continue
        for p in sorted(folder.rglob("*") if deep else folder.iterdir()):
            if not p.is_file() or p.name.endswith(pub.MANIFEST_SUFFIX) or not pub.manifest_path(p).is_file():
                continue
            r = str(p.relative_to(src_root))
            # a file inside a declared folder (a policy, a run's final/) belongs to that output
            inside = any(str(q) in declared for q in Path(r).parents)
            if r != rel and r not in declared and not inside and not pub.is_checkpoint(r) \
                    and not p.name.startswith(pub.UNREAD_COMPANIONS):
                out.append(r)
    return out


def resolved_configs(resolved_dir: Path, hashes) -> dict[str, tuple[str, dict | None]]:
    """Config hash -> (the resolved config's JSON text, None; or for a tuning run's config, which
    no file holds, its text derived again from a resolved config there and {"config_hash": that
    config's, "lr": its rate}). Hashes found neither way are left out."""
    from sparserl.engines.lr_tuning import tuning_configs
    out, derived = {}, None
    for h in sorted(h for h in hashes if h):
        path = resolved_dir / f"{h}.json"
        if path.is_file():
            out[h] = (path.read_text(), None)
            continue
        if derived is None:
            derived = {t: (p.stem, c) for p in sorted(resolved_dir.glob("*.json"))
                       for t, c in tuning_configs(json.loads(p.read_text())).items()}
        if h in derived:
            base, c = derived[h]
            out[h] = (json.dumps(c, indent=1), {"config_hash": base, "lr": c["rl"]["lr"]})
    return out


def cmd_pack(args):
    from sparserl.core.artifacts import read_manifest
    S = setup(args)
    src_root = Path(args.results).resolve().parents[1] if args.results else REPO
    if args.results and Path(args.results).resolve().name != S.scale:
        raise SystemExit(f"sparserl published pack: --results {args.results} is not a results/{S.scale} folder")
    P = plan(dag_jobs(S.configfiles))
    index = pub.read_index(S.root)
    index.update(scale=S.scale, configfiles=S.configfiles)
    files = index.setdefault("files", {})
    copied, same, missing, skipped = 0, 0, [], []
    todo = []
    for rel in P.needed:
        src = src_root / rel
        if pub.is_checkpoint(rel) or src.is_dir():
            skipped.append(rel)  # a checkpoint or a folder: a rebuild rule that reads it cannot be published
            continue
        if not src.is_file() or not pub.manifest_path(src).is_file():
            missing.append(rel)  # not made yet (a later shard), or cut off before its manifest
            continue
        todo.append((rel, True))
        todo += [(c, False) for c in companions(src_root, rel, P.declared)]
    configs = set()
    for rel, declared in dict.fromkeys(todo):
        key = S.key(rel)
        if key is None:
            skipped.append(rel)
            continue
        src = src_root / rel
        if pub.copy_with_manifest(src, S.root / key):
            copied += 1
        else:
            same += 1
        m = read_manifest(src) or {}
        configs.add(m.get("config_hash"))
        files[key] = {"group": pub.group_of(key), "declared": declared, "bytes": src.stat().st_size,
                      "sha256": pub.sha256(src), "config_hash": m.get("config_hash"),
                      "git_commit": m.get("git_commit")}
    # the resolved configs the tables were made under: status compares them with the current one
    tuning = index.setdefault("tuning_configs", {})
    for h, (text, rate) in resolved_configs(src_root / S.results_dir / S.scale / ".config", configs).items():
        pub.copy_text(text, S.root / pub.CONFIGS / f"{h}.json")
        if rate:
            tuning[h] = rate
    # what an earlier pack published and this one no longer would (an unread companion)
    dropped = [k for k, rec in files.items() if not rec.get("declared") and Path(k).name.startswith(pub.UNREAD_COMPANIONS)]
    for key in dropped:
        for p in (S.root / key, pub.manifest_path(S.root / key)):
            p.unlink(missing_ok=True)
        del files[key]
    pub.write_index(S.root, index)
    n, size = pub.published_size(S.root)
    print(f"published {S.scale}: {copied} files copied, {same} unchanged, from {src_root}"
          + (f"; {len(dropped)} no longer published removed (e.g. {dropped[0]})" if dropped else ""))
    if missing:
        print(f"  {len(missing)} tables not made there yet (pack again when their jobs end), e.g. {missing[0]}")
    if skipped:
        print(f"  {len(skipped)} inputs not publishable (folders or checkpoints), e.g. {skipped[0]}")
    print(f"{S.root}: {n} files, {size / 1e6:.2f} MB")
    return 0


# --------------------------------------------------------------------------------------------- status

def settings_view(cfg: dict) -> dict:
    """The config as the tables depend on it: the rl section without its run lists (a run's identity
    leaves them out: methods.spec.run_settings), as the DAG's params keys do."""
    from sparserl.methods.spec import run_settings
    out = dict(cfg)
    if cfg.get("rl"):
        out["rl"] = run_settings(cfg["rl"])
    return out


def changed_sections(old: dict, new: dict) -> list[str]:
    a, b = settings_view(old), settings_view(new)
    return sorted(k for k in set(a) | set(b) if json.dumps(a.get(k), sort_keys=True, default=str)
                  != json.dumps(b.get(k), sort_keys=True, default=str))


@dataclass
class Status:
    rows: list[dict]                           # per group: files, commits, configs, stale, missing
    stale: dict[str, dict[str, list[str]]]     # group -> config hash -> changed sections
    missing: dict[str, list[str]]              # group -> keys the DAG would publish that are not
    commits: list[str]
    config_hashes: list[str]


def status(S: Setup, needed_keys: list[str] | None = None) -> Status:
    from sparserl.core.artifacts import config_hash
    index = pub.read_index(S.root)
    files = index.get("files", {})
    current = config_hash(S.cfg)
    cache: dict[str, list[str] | None] = {}

    tuning = index.get("tuning_configs", {})

    def sections(h: str | None) -> list[str] | None:
        """Sections the tables' config differs in from the current one ([]: none that matter); a
        tuning run's config against the current config's tuning run at the same rate."""
        if h == current:
            return []
        if h not in cache:
            path = S.root / pub.CONFIGS / f"{h}.json"
            now = S.cfg
            if h in tuning:
                from sparserl.engines.lr_tuning import settings, tuning_config
                now = tuning_config(S.cfg, tuning[h]["lr"]) if settings(S.cfg) else S.cfg
            cache[h] = changed_sections(json.loads(path.read_text()), now) if path.is_file() else None
        return cache[h]

    groups: dict[str, dict] = {}
    stale: dict[str, dict[str, list[str]]] = {}
    for key, rec in sorted(files.items()):
        g = groups.setdefault(rec["group"], {"group": rec["group"], "files": 0, "bytes": 0, "commits": set(),
                                             "configs": set(), "stale": 0, "missing": 0})
        g["files"] += 1
        g["bytes"] += rec.get("bytes") or 0
        g["commits"].add(str(rec.get("git_commit"))[:12] + ("-dirty" if str(rec.get("git_commit")).endswith("-dirty") else ""))
        g["configs"].add(str(rec.get("config_hash")))
        diff = sections(rec.get("config_hash"))
        if diff is None or diff:
            g["stale"] += 1
            stale.setdefault(rec["group"], {})[str(rec.get("config_hash"))] = (
                diff if diff is not None else ["(its resolved config was not published: cannot tell)"])
    missing: dict[str, list[str]] = {}
    for key in needed_keys or []:
        if key not in files:
            grp = pub.group_of(key)
            missing.setdefault(grp, []).append(key)
            groups.setdefault(grp, {"group": grp, "files": 0, "bytes": 0, "commits": set(), "configs": set(),
                                    "stale": 0, "missing": 0})["missing"] += 1
    rows = [groups[g] for g in sorted(groups)]
    commits = sorted({str(r.get("git_commit")) for r in files.values()})
    hashes = sorted({str(r.get("config_hash")) for r in files.values()})
    return Status(rows, stale, missing, commits, hashes)


def stale_lines(st: Status) -> list[str]:
    out = []
    for g, by in sorted(st.stale.items()):
        for h, secs in sorted(by.items()):
            out.append(f"stale: {g}: tables of config {h} differ from the current config in: {', '.join(secs)}")
    return out


def cpu_name(cpu: dict) -> str:
    return f"{cpu.get('model') or '?'} [{' '.join(cpu.get('flags') or []) or 'flags unknown'}]"


def machine_records(S: Setup, files: dict) -> dict[str, list[str]]:
    """Each CPU the published tables were made on (model and numerics flags, from their manifests)
    -> the keys made there."""
    from sparserl.core.artifacts import read_manifest
    out: dict[str, list[str]] = {}
    for key in sorted(files):
        m = (read_manifest(S.root / key) or {}).get("machine")
        out.setdefault(cpu_name(m.get("cpu") or {}) if isinstance(m, dict) else "no machine record", []).append(key)
    return out


def cmd_status(args):
    from sparserl.core.artifacts import config_hash
    from sparserl.core.machine import machine_record
    S = setup(args)
    needed = [k for k in (S.key(r) for r in plan(dag_jobs(S.configfiles, outputs=False)).needed
                          if not pub.is_checkpoint(r)) if k]
    st = status(S, needed)
    print(f"published/{S.scale} ({S.root}): config {' '.join(S.configfiles)} (hash {config_hash(S.cfg)} now)")
    head = f"{'group':32s} {'files':>6s} {'MB':>7s} {'stale':>6s} {'missing':>8s}  commits / config hashes"
    print(head + "\n" + "-" * len(head))
    for r in st.rows:
        print(f"{r['group']:32s} {r['files']:6d} {r['bytes'] / 1e6:7.2f} {r['stale']:6d} {r['missing']:8d}  "
              f"{', '.join(sorted(r['commits'])) or '-'} / {', '.join(sorted(r['configs'])) or '-'}")
    for line in stale_lines(st):
        print(line)
    for g, keys in sorted(st.missing.items()):
        print(f"missing: {g}: {len(keys)} tables the current config's DAG reads, e.g. {keys[0]}")
    # which CPUs made them: a rerun elsewhere is not expected to give the same bytes (verify, resume)
    files = pub.read_index(S.root).get("files", {})
    here = machine_record()["cpu"]
    for name, keys in machine_records(S, files).items():
        print(f"machine: {len(keys)} files made on {name}")
    if files:
        print(f"machine: this one is {cpu_name(here)}")
    if not st.rows:
        print(f"nothing published yet: `python -m sparserl published pack {S.scale} --results DIR`")
    return 0


# --------------------------------------------------------------------------------------------- rebuild

def cmd_rebuild(args):
    S = setup(args)
    out = Path(args.out).resolve()
    index = pub.read_index(S.root)
    files = index.get("files", {})
    if not files:
        raise SystemExit(f"sparserl published rebuild: nothing published under {S.root}; "
                         f"`python -m sparserl published pack {S.scale}` first")
    P = plan(dag_jobs(S.configfiles, outputs=False))
    st = status(S, [k for k in (S.key(r) for r in P.needed) if k])
    for line in stale_lines(st):
        print(line)
    # restore: a file with equal bytes is left alone (its mtime too, so nothing reruns for it); one
    # with other bytes is a table of this workdir's own runs, which a rebuild does not overwrite
    clash = [S.rel(k) for k in files if (out / S.rel(k)).is_file()
             and pub.sha256(out / S.rel(k)) != pub.sha256(S.root / k)]
    if clash and not args.force:
        raise SystemExit(f"sparserl published rebuild: {len(clash)} published tables differ from those {out} "
                         f"already holds (e.g. {clash[0]}): tables of its own runs; rebuild elsewhere "
                         "(--out DIR) or overwrite them (--force)")
    restored = 0
    for key in files:
        src = S.root / key
        if not src.is_file():
            raise SystemExit(f"sparserl published rebuild: {src} is in {S.root / pub.INDEX} but not on disk; "
                             f"`git checkout {S.root}` or pack again")
        restored += pub.copy_with_manifest(src, out / S.rel(key))
    from sparserl.core.artifacts import write_json
    results = out / S.results_dir / S.scale
    write_json({"published": str(S.root.relative_to(REPO)) if S.root.is_relative_to(REPO) else str(S.root),
                "commits": st.commits, "config_hashes": st.config_hashes,
                "stale_groups": sorted(st.stale)}, results / pub.ORIGIN, cfg=S.cfg)
    # only the jobs whose every input is published or made by another rebuild job
    have = {S.rel(k) for k in files}
    made: set[str] = set()
    todo = list(P.rebuild)
    ready, skipped = [], []
    while True:
        step = [j for j in todo if all(i in have or i in made for i in j.inputs)]
        if not step:
            break
        for j in step:
            ready.append(j)
            made.update(j.outputs)
            todo.remove(j)
    for j in todo:
        miss = [i for i in j.inputs if i not in have and i not in made]
        skipped.append(f"{j.rule} (missing {len(miss)} table(s), e.g. {miss[0]})")
    for line in skipped:
        print(f"not rebuilt: {line}")
    targets = sorted({o for j in ready for o in j.outputs})
    rules = sorted({j.rule for j in ready})
    print(f"rebuild {S.scale}: {restored} published files restored under {out}; {len(ready)} jobs "
          f"({len(rules)} rules) from published tables, no training")
    if not targets:
        return 1
    cmd = snakemake_cmd(S.configfiles, out, "--cores", str(args.cores), "--allowed-rules", *rules,
                        "--rerun-triggers", "mtime", "params", "input", "code", "--", *targets)
    t0 = time.time()
    rc = subprocess.run(cmd, cwd=REPO).returncode
    print(f"rebuild {S.scale}: snakemake rc {rc} in {time.time() - t0:.0f} s; figures under "
          f"{out / S.figures_dir / S.scale}/, CLAIMS.md and RESULTS.md there, the ranking in "
          f"{out / S.results_dir / S.scale / 'head_to_head'}/")
    return rc


# --------------------------------------------------------------------------------------------- resume

def _git(tree: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"sparserl published resume: {tree} is not a git checkout ({out.stderr.strip()[:200]}); "
                         "give the sweep's pinned worktree as --tree")
    return out.stdout.strip()


def machine_mismatch(manifest: dict) -> list[str]:
    """What of this machine (CPU, platform, BLAS, package versions) differs from the one that made a
    published table (`machine_differences`, less the job's thread settings): tables restored from
    another machine record would not be the bytes a rerun here makes."""
    from sparserl.core.machine import machine_record
    return [d for d in machine_differences(manifest, {"machine": machine_record()})
            if d.startswith(("machine.cpu.", "machine.platform.", "machine.blas_libs", "machine.versions."))]


def pending_restored(S: Setup, tree: Path, targets: list[str], restored: set[str]) -> list[str]:
    """The restored tables Snakemake would make again for `targets` (its own `--detailed-summary`
    plan, mtime trigger only): those whose upstream it must still make."""
    out = subprocess.run(snakemake_cmd(S.configfiles, tree, "--detailed-summary", "--rerun-triggers", "mtime",
                                       "--", *targets, tree=tree), cwd=tree, capture_output=True, text=True,
                         timeout=1800)
    if out.returncode:
        raise SystemExit("sparserl published resume: Snakemake's plan of the sweep failed:\n" + out.stderr[-3000:])
    lines = out.stdout.splitlines()
    cols = lines[0].split("\t") if lines else []
    redo = []
    for line in lines[1:]:
        row = dict(zip(cols, line.split("\t")))
        if row.get("plan") == "update pending" and row.get("output_file") in restored:
            redo.append(row["output_file"])
    return sorted(redo)


def cmd_resume(args):
    """Restore the published tables of the sweep's own commit into its worktree, then run what is
    left. Snakemake reruns a job whose upstream it must make (a wiped tree has no weights), so the
    upstream of restored tables is made first, with those tables left out (`--omit-from`), and the
    restored tables are then dated after it."""
    from sparserl.core.artifacts import read_manifest
    S = setup(args)
    tree = Path(args.tree).resolve()
    head = _git(tree, "rev-parse", "HEAD")
    if _git(tree, "status", "--porcelain", "--untracked-files=no"):
        raise SystemExit(f"sparserl published resume: {tree} has uncommitted changes; a sweep runs from a "
                         "pinned commit (`git -C TREE stash` or a fresh worktree)")
    files = pub.read_index(S.root).get("files", {})
    mine = sorted(k for k, rec in files.items() if rec.get("git_commit") == head)
    others = len(files) - len(mine)
    if not mine:
        raise SystemExit(f"sparserl published resume: no table under {S.root} was made at {head[:12]} (the "
                         f"tree's commit); check out the sweep's pinned commit there ({', '.join(sorted({str(r.get('git_commit'))[:12] for r in files.values()})) or 'none published'})")
    diffs = machine_mismatch(read_manifest(S.root / mine[0]) or {})
    if diffs and not args.other_machine:
        raise SystemExit(f"sparserl published resume: {S.root / mine[0]} was made on another machine record "
                         f"({'; '.join(diffs[:3])}): a rerun here would not make its bytes, so the sweep would "
                         "mix two; rerun the sweep here from scratch, or pass --other-machine to restore anyway")
    restored, kept = [], []
    for key in mine:
        rel = S.rel(key)
        dst = tree / rel
        if dst.is_file() and pub.sha256(dst) != pub.sha256(S.root / key):
            kept.append(rel)  # the tree's own run made other bytes: never overwritten
            continue
        pub.copy_with_manifest(S.root / key, dst)
        restored.append(rel)
    print(f"resume {S.scale}: {len(restored)} published tables of {head[:12]} restored under {tree}"
          + (f"; {len(kept)} differ from the tree's own and were kept (e.g. {kept[0]})" if kept else "")
          + (f"; {others} made at other commits not restored (the tree remakes them)" if others else ""))
    have = set(restored)

    def touch():
        now = time.time()
        for rel in restored:
            for p in (tree / rel, pub.manifest_path(tree / rel)):
                if p.is_file():
                    os.utime(p, (now, now))

    # what the rebuild rules read (figures, ranking, claims: `published rebuild` makes them) and
    # the tuning's tables, less what is restored: the work left
    jobs, _ = dag_jobs(S.configfiles, outputs=False, tree=tree)
    needed = plan((jobs, set())).needed
    targets = [r for r in needed if r not in have]
    print(f"resume {S.scale}: {len(targets)} of {len(needed)} tables the rebuild reads are left to make")
    # a restored table whose job also makes a file that is not restored (make_tasks: the published
    # benchmarks beside the pool) is remade with it, the same bytes on this machine record; left
    # out, it would take that job and everything after it along
    job_of = {o: j for j in jobs for o in j.outputs}
    remade = {f for f in have if f in job_of and any(o not in have for o in job_of[f].outputs)}
    if remade:
        print(f"resume {S.scale}: {len(remade)} restored tables are made again by jobs whose other outputs "
              f"are gone (e.g. {sorted(remade)[0]})")
    run = ["--cores", str(args.cores), "--rerun-incomplete", "--keep-going", "--rerun-triggers", "mtime"]
    redo: list[str] = []
    for phase in range(1, 5):
        touch()
        redo = [f for f in pending_restored(S, tree, targets, have) if f not in remade]
        if not redo:
            break
        print(f"resume {S.scale}: phase {phase}: {len(redo)} restored tables wait on upstream that the tree "
              f"lacks (e.g. {redo[0]}); making that upstream first, without them")
        phase_args = [*run, "--omit-from", *redo]
        if args.plan:  # Snakemake's own count of the phase's jobs, by rule
            dry = subprocess.run(snakemake_cmd(S.configfiles, tree, *phase_args, "-n", "--", *targets, tree=tree),
                                 cwd=tree, capture_output=True, text=True)
            text = dry.stdout + dry.stderr
            stats = text[text.find("Job stats:"):].split("\n\n")[0] if "Job stats:" in text else text[-2000:]
            print(f"resume {S.scale}: phase {phase} would run (snakemake -n):\n{stats}")
            return dry.returncode
        rc = subprocess.run(snakemake_cmd(S.configfiles, tree, *phase_args, "--", *targets, tree=tree),
                            cwd=tree).returncode
        if rc:
            return rc
    if redo:
        print(f"resume {S.scale}: {len(redo)} restored tables will be made again (e.g. {redo[0]})")
    if args.plan:
        print(f"resume {S.scale}: the plan ends here (--plan); without it Snakemake makes the {len(targets)} tables")
        return 0
    return subprocess.run(snakemake_cmd(S.configfiles, tree, *run, "--", *targets, tree=tree), cwd=tree).returncode


# --------------------------------------------------------------------------------------------- verify

def run_keys(files: dict, run: str) -> list[str]:
    """The published keys of a run: `grpo_g16/seed0` (an RL run) or any folder under results/."""
    run = run.strip("/")
    prefixes = [f"results/rl/{run}/", f"results/{run}/", f"{run}/"]
    for pre in prefixes:
        keys = sorted(k for k in files if k.startswith(pre))
        if keys:
            return keys
    return []


def machine_differences(published: dict, fresh: dict) -> list[str]:
    """What of the machine (CPU instruction set, torch build, BLAS, versions) differs between two
    manifests: bytes are not expected to match across these (sparserl.core.machine.compare)."""
    from sparserl.core.machine import compare
    _, diffs, _ = compare(published, fresh, names=("published", "here"))
    return [d for d in diffs if d.startswith("machine.")]


def compare_run(S: Setup, keys: list[str], fresh_root: Path) -> tuple[list[str], bool, list[str]]:
    """(report lines, all equal, machine differences) of a run's published tables against fresh ones."""
    from sparserl.core.artifacts import read_manifest, read_table
    lines, equal, machine = [], True, []
    for key in keys:
        pub_path, new_path = S.root / key, fresh_root / S.rel(key)
        if not new_path.is_file():
            lines.append(f"{key}: not made by the fresh run")
            equal = False
            continue
        for d in machine_differences(read_manifest(pub_path) or {}, read_manifest(new_path) or {}):
            if d not in machine:
                machine.append(d)
        if pub.sha256(pub_path) == pub.sha256(new_path):
            lines.append(f"{key}: equal (same bytes)")
            continue
        if pub_path.suffix not in (".parquet", ".jsonl", ".csv"):
            lines.append(f"{key}: bytes differ (not a table: no column comparison)")
            equal = False
            continue
        diffs = pub.compare_tables(read_table(pub_path), read_table(new_path))
        if not pub.unexpected(diffs):
            lines.append(f"{key}: equal" + (f" but for timing ({'; '.join(diffs)})" if diffs else " (values)"))
            continue
        equal = False
        lines.append(f"{key}: differs")
        lines += [f"  {d}" for d in diffs]
    return lines, equal, machine


def cmd_verify(args):
    S = setup(args)
    files = pub.read_index(S.root).get("files", {})
    keys = run_keys(files, args.run)
    if not keys:
        runs = sorted({r for r in map(pub.run_of, files) if r})
        raise SystemExit(f"sparserl published verify: no published tables of {args.run!r} under {S.root}; "
                         f"published runs: {', '.join(runs[:8]) or 'none'}{' ...' if len(runs) > 8 else ''}")
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix=f"sparserl-verify-{S.scale}-")).resolve()
    targets = [S.rel(k) for k in keys if files[k].get("declared")]
    print(f"verify {S.scale} {args.run}: rerunning {len(targets)} declared tables from scratch in {scratch}")
    t0 = time.time()
    cmd = snakemake_cmd(S.configfiles, scratch, "--cores", str(args.cores), "--", *targets)
    rc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}).returncode
    if rc:
        raise SystemExit(f"sparserl published verify: the rerun failed (snakemake rc {rc}); its logs are under "
                         f"{scratch / S.results_dir / S.scale / 'logs'}")
    lines, equal, machine = compare_run(S, keys, scratch)
    print(f"rerun took {time.time() - t0:.0f} s")
    print("\n".join(lines))
    if equal:
        print(f"verify {args.run}: equal ({len(keys)} tables)")
        return 0
    if machine:
        print(f"verify {args.run}: bytes are not expected to match: " + "; ".join(machine))
        return 0
    print(f"verify {args.run}: DIFFERS on the same machine record, code at this commit changed its numbers")
    return 1


def register(sub, add) -> None:
    p = sub.add_parser("published", help="published/<scale>/: pack a sweep's tables, their status, rebuild the "
                       "figures, ranking and CLAIMS.md from them, verify one run by rerunning it")
    psub = p.add_subparsers(dest="action", required=True)

    def common(name, fn, help):
        q = psub.add_parser(name, help=help)
        q.add_argument("scale", help="tiny or small (or another, with --configfile)")
        q.add_argument("--configfile", nargs="+", default=None,
                       help="the sweep's config files (default: those recorded at pack, else the scale's: "
                            + "; ".join(f"{k}: {' '.join(v)}" for k, v in SCALE_CONFIGS.items()) + ")")
        q.add_argument("--published", default=None, help="the published folder (default: published/ of the checkout)")
        q.set_defaults(fn=fn)
        return q

    q = common("pack", cmd_pack, "copy the tables of finished jobs into published/<scale>/ (adds; removes only what it no longer publishes)")
    q.add_argument("--results", default=None, help="the sweep's results/<scale> folder (default: this checkout's)")
    common("status", cmd_status, "what is published, at which commits and configs, stale or missing")
    q = common("rebuild", cmd_rebuild, "restore the published tables and make every figure, the ranking and "
               "CLAIMS.md from them (snakemake, rebuild rules only: nothing trains)")
    q.add_argument("--out", default=".", help="workdir to restore into and build in (default: the current folder)")
    q.add_argument("--force", action="store_true", help="overwrite tables --out holds that differ from the published")
    q.add_argument("--cores", type=int, default=2)
    q = common("resume", cmd_resume, "continue a sweep in its pinned worktree after a wipe: restore the "
               "tables published at its commit, then make what is left (weights first where a restored table "
               "needs them)")
    q.add_argument("--tree", required=True, help="the sweep's checkout (a git worktree at the pinned commit)")
    q.add_argument("--cores", type=int, default=1)
    q.add_argument("--plan", action="store_true", help="restore and print the phases; run nothing")
    q.add_argument("--other-machine", action="store_true",
                   help="restore tables made on another machine record (bytes a rerun here would not make)")
    q = common("verify", cmd_verify, "rerun one published run from scratch at this commit and compare its tables")
    q.add_argument("run", help="a published run, as results/<scale>/rl/ names it: grpo_g16/seed0 (or a folder "
                   "under results/<scale>/, e.g. values/harvest)")
    q.add_argument("--scratch", default=None, help="where to rerun (default: a new temp folder)")
    q.add_argument("--cores", type=int, default=2)
