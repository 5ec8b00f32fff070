"""`python -m sparserl study-*`: the commands workflow/rules/studies.smk calls.

Data commands read the cached rollouts (reference cache + oracle) and write tables with a manifest;
`sparserl figure` (sparserl.cli.figures) draws the figures from those tables. Every path defaults
to `StudyPaths`, so a rule may pass explicit paths (it does) or none.

    sparserl study-basis-batches --config configs/tiny.yaml        # raw batches (~1 s tiny)
    sparserl study-basis-table --config configs/tiny.yaml --table mse_by_method
"""
from __future__ import annotations

from pathlib import Path


def _layout(args):
    """The command's config and its results layout, built once (the paths a rule passes win)."""
    from sparserl.core.config import load_config
    from sparserl.methods.run import layout
    cfg = load_config(args.config)
    return cfg, layout(cfg)


def _caches(P, args, pair: bool = False):
    """The caches given, else those of the BASIS study's F3/F5 tables (`study_variants(P)[""]`),
    or with pair=True (the V0.5 statistics) the snapshot pair basis.study_reference/study_oracle."""
    from sparserl.studies import load_study_data
    from sparserl.studies.basis_checkpoints import STRESS, study_variants
    v = study_variants(P)
    refs = v.get(STRESS, v.get("")) if pair else v.get("")
    ref = args.reference or (refs[0] if refs else None)
    orc = args.oracle or (refs[1] if refs else None)
    if ref is None or orc is None:
        raise SystemExit("no caches: pass --reference and --oracle, or set basis.study_reference/study_oracle")
    return load_study_data(ref, orc)


def _learned_priors(P, data, v) -> dict:
    """The learned priors' values for the V0.5 study (the trained V0 when v05.v0_prior is set)."""
    from sparserl.studies import study_seed, v05_stats
    return {"v0": v05_stats.v0_prior_values(P, data, study_seed(P.cfg))} if v.get("v0_prior") else {}


def _data_info(P, data) -> dict:
    """What the caches are: the snapshot pair's policy refs, or the RL checkpoint and start policy
    (`study_variants`), beside their paths and sizes."""
    from sparserl.studies.basis_checkpoints import main_checkpoint, study_variants
    cfg = P.cfg
    b = cfg.get("basis") or {}
    ref, orc = b.get("study_reference"), b.get("study_oracle")
    ck = main_checkpoint(P)
    study = "snapshot pair"
    if ck is not None and str(study_variants(P)[""][1]) == str(data.oracle_path):
        ref, orc, study = cfg["rl"]["policy"], f"{ck.method}/seed{ck.seed}/{ck.label}", "rl checkpoint"
    return {"reference": data.ref_path, "oracle": data.oracle_path, "study_reference": ref, "study_oracle": orc,
            "study": study, "prompts": data.n_prompts, "reference_n": int(data.ref.shape[1]),
            "oracle_n": int(data.oracle.shape[1]), "mean_oracle_p": float(data.p.mean()),
            "mean_reference_phat": float(data.ref.mean())}


def _write(df, out, cfg, extra=None, csv=True):
    from sparserl.core.artifacts import write_table
    out = Path(out)
    write_table(df, out, cfg=cfg, extra=extra)
    if csv and out.suffix == ".parquet":
        write_table(df, out.with_suffix(".csv"), cfg=cfg, extra=extra)
    print(f"{len(df)} rows -> {out}")


def cmd_basis_batches(args):
    from sparserl.core.artifacts import write_table
    from sparserl.studies import basis_value, settings, study_seed
    cfg, P = _layout(args)
    data = _caches(P, args)
    s = settings(cfg)["value"]
    raw = basis_value.simulate_from_settings(data, s, study_seed(cfg))
    out = args.out or P.studies.basis_batches()
    write_table(raw, out, cfg=cfg, extra={"study": "basis_value", "settings": s, "data": _data_info(P, data)})
    print(f"{raw['repeat'].nunique()} batches x {raw['method'].nunique()} methods -> {out}")


def cmd_basis_table(args):
    from sparserl.core.artifacts import read_table
    from sparserl.studies import basis_value, settings, study_seed
    cfg, P = _layout(args)
    SP = P.studies
    raw = read_table(args.batches or SP.basis_batches())
    df = basis_value.make_table(args.table, raw, settings(cfg)["value"], study_seed(cfg))
    _write(df, args.out or SP.table("basis", args.table), cfg, {"study": "basis_value", "table": args.table})


def cmd_basis_sensitivity(args):
    from sparserl.studies import basis_value, settings, study_seed
    cfg, P = _layout(args)
    data = _caches(P, args)
    df = basis_value.sensitivity(data, args.param, settings(cfg)["value"], study_seed(cfg))
    _write(df, args.out or P.studies.table("basis", f"sensitivity_{args.param}"), cfg,
           {"study": "basis_value", "sensitivity": args.param, "data": _data_info(P, data)})


def cmd_basis_summary(args):
    from sparserl.core.artifacts import read_manifest, read_table, write_json
    from sparserl.studies import basis_value, settings, study_seed
    cfg, P = _layout(args)
    SP = P.studies
    path = args.batches or SP.basis_batches()
    info = (read_manifest(path) or {}).get("data")
    out = basis_value.summary(read_table(path), settings(cfg)["value"], study_seed(cfg), info)
    write_json(out, args.out or SP.summary("basis"), cfg=cfg, extra={"study": "basis_value"})
    h = out.get("headline", {})
    if "basis_vs_reinforce_pp_pct" in h:
        r = h["basis_vs_reinforce_pp_pct"]
        print(f"BASIS vs REINFORCE++: {r['pct_change']:+.1f}% +- {r['se']:.1f} (paper: -69%)")
    if "basis_vs_grpo_g8_pct" in h:
        r = h["basis_vs_grpo_g8_pct"]
        print(f"BASIS vs GRPO G=8: {r['pct_change']:+.1f}% +- {r['se']:.1f}")


def cmd_v05_bias(args):
    from sparserl.studies import settings, study_seed, v05_stats
    cfg, P = _layout(args)
    data = _caches(P, args, pair=True)
    v = settings(cfg)["v05"]
    df = v05_stats.bias_table(data, v, study_seed(cfg), _learned_priors(P, data, v))
    _write(df, args.out or P.studies.table("v05", "bias_mse_by_k"), cfg,
           {"study": "v05", "settings": v, "data": _data_info(P, data)})


def cmd_v05_osla(args):
    from sparserl.core.artifacts import write_table
    from sparserl.studies import settings, study_seed, v05_stats
    cfg, P = _layout(args)
    data = _caches(P, args, pair=True)
    v = settings(cfg)["v05"]
    runs = v05_stats.osla_runs(data, v, study_seed(cfg), _learned_priors(P, data, v))
    out = args.out or P.studies.v05_runs()
    write_table(runs, out, cfg=cfg, extra={"study": "v05", "settings": v, "data": _data_info(P, data)})
    print(f"{len(runs)} prompt runs -> {out}")


def cmd_v05_table(args):
    from sparserl.core.artifacts import read_table
    from sparserl.studies import settings, v05_stats
    cfg, P = _layout(args)
    SP = P.studies
    df = v05_stats.make_run_table(args.table, read_table(args.runs or SP.v05_runs()), settings(cfg)["v05"])
    _write(df, args.out or SP.table("v05", args.table), cfg, {"study": "v05", "table": args.table})


def cmd_v05_summary(args):
    from sparserl.core.artifacts import read_manifest, read_table, write_json
    from sparserl.studies import settings, v05_stats
    cfg, P = _layout(args)
    SP = P.studies
    bias_path = args.bias or SP.table("v05", "bias_mse_by_k")
    runs_path = args.runs or SP.v05_runs()
    out = v05_stats.summary(read_table(bias_path), read_table(runs_path), settings(cfg)["v05"])
    out["data"] = (read_manifest(runs_path) or {}).get("data")
    write_json(out, args.out or SP.summary("v05"), cfg=cfg, extra={"study": "v05"})
    print(f"fused bias within 1/sqrt(k): {out['fused_bias_within_bound']} "
          f"(max |bias| sqrt(k) = {max(out['fused_bias_max_ratio_by_k'].values()):.3f})")
    for prior, r in out["osla_mean_budget"].items():
        print(f"OSLA mean budget at c={out['c']:g}, prior {prior}: {r['mean']:.2f} +- {r['se']:.2f}")


def _checkpoint(P, label):
    from sparserl.studies.basis_checkpoints import study_checkpoints
    cks = study_checkpoints(P)
    if not cks:
        raise SystemExit("no RL checkpoints to study: set basis.study_checkpoints "
                         "({method: grpo_g8, seed: 0, fractions: [0.25, 0.5, 1.0]}) and an rl section")
    by = {c.label: c for c in cks} | {c.stage: c for c in cks}
    if label not in by:
        raise SystemExit(f"--checkpoint {label!r} is not one of the study's checkpoints {sorted(by)}")
    return by[label]


def cmd_checkpoint_oracle(args):
    """Oracle of one RL checkpoint: basis.oracle_n rollouts per prompt on the study's prompts."""
    from sparserl.core.artifacts import read_table
    from sparserl.studies.basis_checkpoints import study_prompt_ids
    from sparserl.core.config import setting
    from sparserl.values.mcvalues import mc_values
    cfg, P = _layout(args)
    ck = _checkpoint(P, args.checkpoint)
    if not ck.path.is_dir():
        raise SystemExit(f"{ck.path} is missing: the {ck.stage} checkpoint (step {ck.step}) of {ck.method} seed "
                         f"{ck.seed} that basis.study_checkpoints asks for. The run keeps it when trained with "
                         f"this config; retrain it: `snakemake --cores 2 -f {ck.run_dir}/metrics.parquet`")
    pool = args.pool or P.train_pool()
    ids = study_prompt_ids(cfg, read_table(pool)["id"])
    n = args.n or int(setting(cfg, "basis", "oracle_n"))
    mc_values(cfg, f"{ck.method}/seed{ck.seed}/{ck.label}", n, args.out or ck.oracle, threads=args.threads,
              seed_offset=args.seed_offset, policy_dir=ck.path, pool=pool, checkpoint=True, prompt_ids=ids)


def cmd_basis_stages(args):
    """The stage tables of the RL-checkpoint study (stage_mse_by_method, stage_initial_vs_refined)."""
    from sparserl.studies import load_study_data, settings, study_seed
    from sparserl.studies.basis_checkpoints import STAGE_TABLES, stage_tables, study_checkpoints
    cfg, P = _layout(args)
    cks = study_checkpoints(P)
    if not cks:
        raise SystemExit("no RL checkpoints to study: set basis.study_checkpoints and an rl section")
    oracles = args.oracles or [str(c.oracle) for c in cks]
    if len(oracles) != len(cks):
        raise SystemExit(f"--oracles: {len(oracles)} given for the study's {len(cks)} checkpoints "
                         f"{[c.label for c in cks]} (in that order)")
    ref = args.reference or P.reference_cache(cfg["rl"]["policy"])
    stages = [(c, load_study_data(ref, o)) for c, o in zip(cks, oracles)]
    s = settings(cfg)["value"]
    tables = stage_tables(stages, s, study_seed(cfg))
    outs = dict(zip(STAGE_TABLES, args.out or [P.studies.table("basis", t) for t in STAGE_TABLES]))
    info = {"reference": str(ref), "reference_policy": cfg["rl"]["policy"],
            "checkpoints": [dict(stage=c.stage, fraction=c.fraction, step=c.step, path=str(c.path), oracle=o)
                            for c, o in zip(cks, oracles)]}
    for name, df in tables.items():
        _write(df, outs[name], cfg, {"study": "basis_checkpoints", "table": name, "settings": s, "data": info})
    t = tables["stage_mse_by_method"].set_index(["stage", "method"])
    for c in cks:
        r = t.loc[c.stage]
        if "basis_unb" in r.index:
            b = r.loc["basis_unb"]
            nan = float("nan")
            print(f"{c.stage} ({c.label}): BASIS UNB MSE {b['mse']:.4f}, vs REINFORCE++ "
                  f"{b.get('pct_vs_reinforce_pp', nan):+.1f}%, vs GRPO G=8 {b.get('pct_vs_grpo', nan):+.1f}%")


def register(sub, add) -> None:
    """Add the study commands to the `sparserl` parser (`add` is cli.build_parser's helper)."""
    from sparserl.studies import BASIS_SENSITIVITY, BASIS_TABLES, V05_RUN_TABLES

    def caches(p):
        p.add_argument("--reference", help="reference-rollout cache (default: from basis.study_reference)")
        p.add_argument("--oracle", help="oracle cache (default: from basis.study_oracle)")
        p.add_argument("--out", help="output path (default: from StudyPaths)")
        return p

    caches(add("study-basis-batches", cmd_basis_batches,
               "BASIS value study: simulate batches on cached rollouts (raw per-batch table)"))
    p = add("study-basis-table", cmd_basis_table, "BASIS value study: one aggregated table (+ CSV)")
    p.add_argument("--table", required=True, choices=BASIS_TABLES)
    p.add_argument("--batches", help="raw batches table (default: StudyPaths)")
    p.add_argument("--out")
    p = caches(add("study-basis-sensitivity", cmd_basis_sensitivity, "BASIS sensitivity to eps, n, B or the beta grid"))
    p.add_argument("--param", required=True, choices=BASIS_SENSITIVITY)
    p = add("study-basis-summary", cmd_basis_summary, "BASIS value study: headline JSON (MSE vs REINFORCE++, GRPO)")
    p.add_argument("--batches")
    p.add_argument("--out")
    p = add("study-checkpoint-oracle", cmd_checkpoint_oracle,
            "BASIS value study on RL checkpoints: oracle_n rollouts per study prompt of one checkpoint",
            threads=True)
    p.add_argument("--checkpoint", required=True, help="its label (step00015, final) or stage (early, middle, late)")
    p.add_argument("--n", type=int, help="rollouts per prompt (default: basis.oracle_n)")
    p.add_argument("--seed-offset", type=int, default=1000003, help="as the oracle_values rule's")
    p.add_argument("--pool", help="the train pool the study's prompts are drawn from (default: Paths.train_pool)")
    p.add_argument("--out", help="output parquet (default: Paths.checkpoint_oracle)")
    p = add("study-basis-stages", cmd_basis_stages,
            "BASIS value study on RL checkpoints: MSE by method per stage and Figure 2's table")
    p.add_argument("--reference", help="reference cache of the start policy (default: rl.policy's)")
    p.add_argument("--oracles", nargs="+", help="the checkpoints' oracles, in training order")
    p.add_argument("--out", nargs=2, help="stage_mse_by_method and stage_initial_vs_refined parquet paths")
    caches(add("study-v05-bias", cmd_v05_bias, "V0.5: exact bias/MSE of the fused baseline at fixed k"))
    caches(add("study-v05-osla", cmd_v05_osla, "V0.5: OSLA runs per prior and cost c on cached rollouts"))
    p = add("study-v05-table", cmd_v05_table, "V0.5: one table from the OSLA runs (+ CSV)")
    p.add_argument("--table", required=True, choices=V05_RUN_TABLES)
    p.add_argument("--runs")
    p.add_argument("--out")
    p = add("study-v05-summary", cmd_v05_summary, "V0.5: headline JSON (OSLA budget, bias bound)")
    p.add_argument("--bias")
    p.add_argument("--runs")
    p.add_argument("--out")
