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
    return out


def T(group, default=1):
    """Threads of a rule group: its SLURM cpus at cluster scale, else `default`."""
    return CFG.get("resources", {}).get(group, {}).get("cpus", default)


def cfg_key(*sections):
    """A hash of config sections: as a rule's `params`, a change to them reruns the rule. The rl
    section enters without its run lists (methods.spec.run_settings)."""
    from sparserl.core.artifacts import config_hash
    from sparserl.methods.spec import run_settings
    return config_hash({s: run_settings(CFG["rl"]) if s == "rl" and CFG.get("rl") else CFG.get(s)
                        for s in sections})


def method_key(w):
    from sparserl.core.artifacts import config_hash
    from sparserl.core.config import ConfigError
    from sparserl.methods.spec import load_method, run_settings
    try:
        method = load_method(w.method).to_dict()
    except ConfigError:  # not a method: the rule's own command reports it
        method = w.method
    return config_hash({"rl": run_settings(CFG["rl"]), "rollout": CFG["rollout"], "method": method})


def policy_input(ref):
    """A rule's policy input: the checkpoint dir for pre-trained policies, nothing for hub ones."""
    name = ref.split("@")[0]
    return [str(P.policy(ref))] if CFG["policies"][name]["source"] == "pretrain" else []


def all_targets():
    t = [str(P.eval_summary())]
    if P.pretrained_policies():
        t += [str(P.passrates()), str(P.world_report())]
    if CFG.get("rl"):
        t.append(str(P.rl_summary()))
    study = globals().get("study_targets")  # workflow/rules/studies.smk (needs basis.study_reference/oracle)
    if study:
        t += study()
    v0 = globals().get("v0_targets")  # workflow/rules/values.smk (needs v0.harvest)
    if v0:
        t += v0()
    critique = globals().get("critique_targets")  # workflow/rules/critique.smk (needs critique)
    if critique:
        t += critique()
    figures = globals().get("figure_targets")  # workflow/rules/figures.smk: every registered figure
    if figures:
        t += figures()
    return t
