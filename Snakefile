# sparserl: one DAG from data to figures. Default scale: tiny (configs/tiny.yaml).
#   snakemake --cores 2 all                                   # tiny, on a laptop
#   snakemake --profile slurm all                             # paper, on SLURM (profile sets the config)
# Rules are thin: each calls `python -m sparserl <command>`; paths come from sparserl.core.paths.
import os
import sys

sys.path.insert(0, os.path.join(workflow.basedir, "src"))  # a checkout runs without install

from sparserl.core.config import (ConfigError, describe_overrides, explain_key_change, from_snakemake,
                                  read_yaml, write_resolved)
from sparserl.core.paths import Paths, rl_engine
import sparserl.engines.openrlhf.placement  # noqa: F401  (registers its check of rl.openrlhf at load)

# --configfile replaces the default instead of being merged into it
if not workflow.overwrite_configfiles:
    DEFAULT_CONFIG = os.path.join(workflow.basedir, "configs", "tiny.yaml")
    try:  # Snakemake's own parse names neither the file nor the line of a syntax error
        read_yaml(DEFAULT_CONFIG)
    except ConfigError as e:
        raise WorkflowError(f"config error: {e}")
    configfile: DEFAULT_CONFIG
# A syntax error in a --configfile stops Snakemake's command line before this file runs; the
# logger plugin src/snakemake_logger_plugin_sparserl makes that error name the file and line.
# Files that parse are read again by from_snakemake, which rejects duplicate keys with the line.

# `--config` entries: dotted keys (`rl.steps=20`) nested, string values typed by the schema, a
# wrong one blamed on the command line (sparserl.core.config.from_snakemake)
_OVERRIDES = dict(getattr(workflow.config_settings, "config", None) or {})
try:
    CFG = from_snakemake(config, workflow.configfiles or workflow.overwrite_configfiles, _OVERRIDES)
except ConfigError as e:
    raise WorkflowError(f"config error: {e}")
if _OVERRIDES:
    print(f"sparserl: {describe_overrides(_OVERRIDES, workflow.configfiles or workflow.overwrite_configfiles)}",
          file=sys.stderr)

if CFG.get("rl"):
    # a step that is not a whole number of groups, or a step count past what a run holds, fails
    # here, not hours in, when the trainer sizes its batch
    from sparserl.methods.spec import load_method, prompts_per_step, total_steps
    for _name in CFG["rl"]["methods"]:
        try:
            _method = load_method(_name)
        except ConfigError:  # not a method: its rule's command reports it
            continue
        try:
            prompts_per_step(_method, CFG["rl"]["rollouts_per_step"])
            total_steps(CFG["rl"], _method)
        except ConfigError as e:
            files = ", ".join(map(str, workflow.overwrite_configfiles or workflow.configfiles))
            raise WorkflowError(f"config error: {files}: {e}")

P = Paths(CFG)
SCALE = CFG["scale"]
# Jobs read the config Snakemake resolved (files + `--config` overrides), never the files again
try:  # a results folder that cannot be written: the one line that names it, without our frames
    CONFIGS = str(write_resolved(CFG, P.results / ".config"))
except OSError as e:
    raise WorkflowError(str(e)) from None
# the settings behind each rule's hash param (common.smk cfg_key, run_key), so that a rerun's
# reason names the changed keys ("rl.steps: 60 -> 20"), not two hashes
KEYS_DIR = P.results / ".config" / "keys"
try:
    from snakemake.persistence import ParamsChange as _ParamsChange

    if not getattr(_ParamsChange.__str__, "_sparserl", False):
        _plain_params_change = _ParamsChange.__str__

        def _params_change_str(self):
            return (explain_key_change(self.only_old, self.only_new, KEYS_DIR)
                    or _plain_params_change(self))

        _params_change_str._sparserl = True
        _ParamsChange.__str__ = _params_change_str
except ImportError:  # a Snakemake without it: its own reason (two hashes) stays
    pass
# Snakemake's removal of an output takes its manifest too, and a folder that turned read-only
# under a failed job's outputs is one line with the fix, not a traceback
from sparserl.core.snakemake_io import install_removal_hooks

install_removal_hooks()
# the figures' footer names the config files given (the resolved file is named by its hash)
CONFIG_NAME = "+".join(os.path.basename(str(f)) for f in (workflow.overwrite_configfiles or workflow.configfiles))
SPARSERL = f"{sys.executable} -m sparserl"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ["PYTHONPATH"] = os.path.join(workflow.basedir, "src") + os.pathsep + os.environ.get("PYTHONPATH", "")


include: "workflow/rules/common.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/policies.smk"
include: "workflow/rules/basis.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/tuning.smk"
include: "workflow/rules/rl.smk"
include: "workflow/rules/ood.smk"
include: "workflow/rules/head_to_head.smk"
include: "workflow/rules/studies.smk"
include: "workflow/rules/values.smk"
include: "workflow/rules/critique.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/claims.smk"


rule all:
    # no `run:` block: a rule with one always reruns, so a finished DAG never says "Nothing to
    # be done"; the output list is printed by `onsuccess` below
    input:
        all_targets(),
    localrule: True


onstart:
    # prerequisites of the jobs about to run, in seconds (a missing bubblewrap, a read-only
    # results folder), before any job: sparserl.cli.preflight
    from sparserl.cli.preflight import problems as _preflight

    _dag = getattr(workflow, "dag", None)
    _jobs = [(j.rule.name, dict(j.wildcards)) for j in (_dag.needrun_jobs() if _dag is not None else ())]
    _bad = _preflight(CFG, _jobs, P.results)
    if _bad:  # one line each, no traceback: nothing has run, nothing is lost
        for _line in _bad:
            print(f"preflight: {_line}", file=sys.stderr)
        sys.exit(1)


onsuccess:
    # the list of every output only when `all` was built: a file target (`targetfiles`) or
    # another rule leaves `targetrules` without `all`
    dag = getattr(workflow, "dag", None)
    targets = {getattr(r, "name", r) for r in (getattr(dag, "targetrules", None) or ())}
    if "all" in targets:
        print(f"\nsparserl {SCALE}: outputs under {P.results}/ and {P.figures}/")
        for f in all_targets():
            print(f"  {f}")
    for _name in sorted(t for t in targets if isinstance(t, str) and t.startswith("rl/")):
        print(f"\n{_name}: " + ", ".join(str(d) for d in rl_method_dirs(_name[3:])))


# A target no rule makes (`rl/<method>` for a method without a file, or under a config without an
# rl section) stops here in one line naming it and the targets there are (sparserl.core.targets)
from sparserl.core.targets import check_targets, unknown_target_message
from sparserl.methods.spec import method_names as _method_names

check_targets(workflow, lambda target: unknown_target_message(
    target, rules=[r.name for r in workflow.rules if not r.has_wildcards()],
    methods=_method_names() if RL else None, results=str(P.results),
    config_files=", ".join(map(str, workflow.overwrite_configfiles or workflow.configfiles))))
