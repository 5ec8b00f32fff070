# Shared helpers for every stage: resources from the config, the list of final targets.
import functools


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

        out["runtime"] = lambda w: -(-estimate(P, rule, dict(w)).ask_minutes // 60) * 60
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


def run_key(run):
    """A run's key (methods.run.Run.key) as a rule's `params`: a change to what the run depends
    on reruns it, and the trainer starts it over. Its settings are recorded under KEYS_DIR, so the
    rerun's reason names the keys that changed (Snakefile)."""
    from sparserl.core.config import settings_key
    key = settings_key(run.identity, KEYS_DIR)
    assert key == run.key, (key, run.key)
    return key


@functools.lru_cache(maxsize=None)
def _rl_run(method, seed):
    from sparserl.methods.run import resolve_run
    # the tuned lr stays unread: the DAG keys a run before tuning/lr.json, its input, exists
    run = resolve_run(CFG, method, seed, read_choice=False)
    if run.owner != method:
        raise WorkflowError(f"{P.run(method, seed).dir}: method {method} repeats {run.owner}'s spec, so its "
                            f"run is {run.dir} (methods.spec.run_owners); ask for that one")
    return run


def rl_run(w):
    """The RL run of a job's wildcards (method, seed): methods.run.resolve_run, once per job."""
    return _rl_run(w.method, str(w.seed))


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
