# Shared helpers for every stage: resources from the config, the list of final targets.


def R(group):
    """SLURM resources of a rule group (config `resources.<group>`), in the slurm plugin's names."""
    spec = CFG.get("resources", {}).get(group, {})
    out = {}
    names = {"gpus": "gpu", "cpus": "cpus_per_task", "mem_mb": "mem_mb", "runtime": "runtime",
             "nodes": "nodes", "slurm_partition": "slurm_partition",
             "slurm_account": "slurm_account", "slurm_extra": "slurm_extra"}
    for key, val in spec.items():
        out[names[key]] = val
    if spec.get("gpus"):
        # one task per job, which starts its own steps (Ray, vLLM): the slurm plugin's default of a
        # task per GPU would multiply cpus_per_task by the GPUs (8 x 64 CPUs for resources.rl)
        out["tasks_per_gpu"] = 0
    return out


def SIZED(group, rule):
    """R(group) with the runtime derived from the job's estimate x 1.5 (sparserl.engines.sizing),
    in whole hours, when the config has a `sizing` section; else the group's own runtime."""
    out = R(group)
    if CFG.get("sizing"):
        from sparserl.engines.sizing import estimate

        out["runtime"] = lambda w: -(-estimate(CFG, rule, dict(w)).ask_minutes // 60) * 60
    return out


def T(group, default=1):
    """Threads of a rule group: its SLURM cpus at cluster scale, else `default`."""
    return CFG.get("resources", {}).get(group, {}).get("cpus", default)


def cfg_key(*sections):
    """A hash of config sections: as a rule's `params`, a change to them reruns the rule. The rl
    section enters without its run lists (methods.spec.run_settings). The settings are recorded
    under KEYS_DIR, so the rerun's reason names the keys that changed (Snakefile)."""
    from sparserl.core.config import settings_key
    from sparserl.methods.spec import run_settings
    return settings_key({s: run_settings(CFG["rl"]) if s == "rl" and CFG.get("rl") else CFG.get(s)
                         for s in sections}, KEYS_DIR)


def method_key(w):
    from sparserl.core.config import ConfigError, settings_key
    from sparserl.methods.spec import load_method, run_settings, study_snapshot_steps
    try:
        spec = load_method(w.method)
        method = spec.to_dict()
    except ConfigError:  # not a method: the rule's own command reports it
        spec, method = None, w.method
    key = {"rl": run_settings(CFG["rl"], spec), "rollout": CFG["rollout"], "method": method}
    # the run the BASIS value study reads keeps extra checkpoints (basis.study_checkpoints):
    # asking for them reruns that run alone; every other run's key is unchanged
    study = study_snapshot_steps(CFG, spec, w.seed) if spec is not None else []
    if study:
        key["study_snapshots"] = study
    return settings_key(key, KEYS_DIR)


def policy_input(ref):
    """A rule's policy input: the checkpoint dir (pre-trained policies), or the hub model's local
    copy that fetch_models writes (workflow/rules/models.smk)."""
    return [str(P.policy(ref))]


def all_targets():
    t = [str(P.eval_summary())]
    if P.pretrained_policies():
        t += [str(P.passrates()), str(P.world_report())]
    if CFG.get("rl"):
        t += [str(P.rl_summary()), str(P.world_compare())]
    study = globals().get("study_targets")  # workflow/rules/studies.smk (needs basis.study_reference/oracle)
    if study:
        t += study()
    v0 = globals().get("v0_targets")  # workflow/rules/values.smk (needs v0.harvest)
    if v0:
        t += v0()
    critique = globals().get("critique_targets")  # workflow/rules/critique.smk (needs critique)
    if critique:
        t += critique()
    h2h = globals().get("head_to_head_targets")  # workflow/rules/head_to_head.smk (needs rl)
    if h2h:
        t += h2h()
    ood = globals().get("ood_targets")  # workflow/rules/ood.smk (needs ood and rl): BASIS Table 2
    if ood:
        t += ood()
    figures = globals().get("figure_targets")  # workflow/rules/figures.smk: every registered figure
    if figures:
        t += figures()
    placed = globals().get("hand_placed_targets")  # workflow/rules/models.smk: each one missing is flagged
    if placed:
        t += placed()
    claims = globals().get("claims_targets")  # workflow/rules/claims.smk: CLAIMS.md and .csv
    if claims:
        t += claims()
    return t
