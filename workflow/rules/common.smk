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


def policy_input(ref):
    """A rule's policy input: the checkpoint dir for pre-trained policies, nothing for hub ones."""
    name = ref.split("@")[0]
    return [str(P.policy(ref))] if CFG["policies"][name]["source"] == "pretrain" else []


def all_targets():
    t = [str(P.eval_summary())]
    if P.pretrained_policies():
        t.append(str(P.passrates()))
    study = globals().get("study_targets")  # workflow/rules/studies.smk (needs basis.study_reference/oracle)
    if study:
        t += study()
    return t
