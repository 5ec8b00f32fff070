# Stage: hub models and hand-placed files.
# fetch_models downloads every hub model the config names (Paths.hub_models: hub policies, Le
# Critique's hub policies, models.hub such as V0's embedder) into models/<org>/<name> on the
# submit host (a local rule: compute nodes are often offline). Rules that load one take its
# directory as input (common.smk policy_input), and every job runs with HF_HUB_OFFLINE=1.
# Tiny/small name no hub model: no rule, no environment change.

HUB_MODELS = P.hub_models()

if HUB_MODELS:
    os.environ["HF_HUB_OFFLINE"] = "1"  # inherited by local jobs and SLURM jobs (sbatch exports the env)

    rule fetch_models:
        output:
            [directory(str(d)) for d in HUB_MODELS.values()],
        params:
            # each hub name with its output dir, in the output's order
            models=" ".join(f"{n}={d}" for n, d in HUB_MODELS.items()),
        log:
            str(P.stage("logs", "fetch_models.log")),
        localrule: True
        resources:
            **R("download"),
        shell:
            "HF_HUB_OFFLINE=0 {SPARSERL} fetch-models --config {CONFIGS} --models {params.models} > {log} 2>&1"


# Files a user places by hand (their config key, how to get them): the inputs of the rules that
# read them, so a dry run names what is missing instead of a job failing hours in.
from sparserl.core.hand_placed import hand_placed_files


def hand_placed(*keys):
    """Input function: the hand-placed files of these config keys (`sparserl.core.hand_placed`);
    a missing one stops the DAG with its key and how to get it."""
    fetched = {str(p) for p in HUB_MODELS.values()}
    files = hand_placed_files(CFG, keys, fetched=fetched)
    return [str(f.path) for f in files]


def model_inputs(*keys):
    """Input function: `hand_placed(*keys)` plus, for v0.embedder, its fetch_models copy when it is
    fetched, so a rule that loads a model waits for it either way."""
    out = hand_placed(*keys)
    emb = ((CFG.get("v0") or {}).get("embedder") or {})
    if any(k == "v0.embedder" or k.startswith("v0.embedder.") for k in keys) and emb.get("path"):
        path = str(P.root / emb["path"])
        out += [str(d) for d in HUB_MODELS.values() if str(d) == path]
    return out


HAND_PLACED = hand_placed_files(CFG, fetched={str(p) for p in HUB_MODELS.values()})

if HAND_PLACED:
    import re as _re

    _HOW = {str(h.path): h for h in HAND_PLACED}

    rule hand_placed_file:
        # never makes its file: when one is missing, a dry run lists this job with the key and how
        # to get the file, and a run stops here with the same words
        output:
            "{hand_placed}",
        wildcard_constraints:
            hand_placed="|".join(_re.escape(p) for p in _HOW),
        params:
            msg=lambda w: (f"missing hand-placed file {w.hand_placed} (config key "
                           f"{_HOW[w.hand_placed].key}): {_HOW[w.hand_placed].how}"),
        message:
            "{params.msg}"
        localrule: True
        shell:
            "echo {params.msg:q} >&2; exit 1"

    def hand_placed_targets():
        return [str(h.path) for h in HAND_PLACED]
