"""Every artifact path of the DAG, built in one place: ``results/{scale}/{stage}/...``.

Snakemake rules and CLI commands both ask this helper, so a rule's output and the command that
writes it can never drift apart.
"""
from __future__ import annotations

from pathlib import Path

from sparserl.core.config import setting, snapshot_tag


def split_policy(ref: str) -> tuple[str, str | None]:
    """'m' -> ('m', None); 'm@p50' -> ('m', 'p50'): a snapshot at 50% of pre-training."""
    name, _, snap = ref.partition("@")
    return name, (snap or None)


MODELS_DIR = "models"  # hub models, fetched on the submit host (rule fetch_models), relative to the workdir


def hub_model_dir(hf_name: str, root: str | Path = ".") -> Path:
    """The local copy of hub model `hf_name` (rule fetch_models): compute jobs read it with
    HF_HUB_OFFLINE=1 instead of each downloading the weights into a shared cache."""
    if not hf_name or hf_name.startswith(("/", ".")) or ".." in Path(hf_name).parts:
        raise ValueError(f"hub model name {hf_name!r} is not an 'org/name' id")
    return Path(root) / MODELS_DIR / hf_name


def rl_engine(cfg: dict) -> str:
    """Which engine trains RL runs: 'local' (the CPU trainer) with an in-process rollout backend
    (`cpu` or `hf`), 'openrlhf' (vLLM + OpenRLHF on SLURM) with `vllm`."""
    return "openrlhf" if cfg["rollout"]["backend"] == "vllm" else "local"


class RunPaths:
    """Every file of one RL run (method x seed): ``results/{scale}/rl/{method}/seed{seed}/``.

    Both engines write the same names (metrics.parquet, final/, rollouts.parquet); only where an
    intermediate checkpoint lives differs: the local trainer saves ``checkpoints/step00030``,
    OpenRLHF saves ``openrlhf/ckpt/global_step30_hf`` (its `save_checkpoint` with ``save_hf``).
    """

    def __init__(self, root: Path, method: str, seed: int | str, engine: str = "local"):
        if engine not in ("local", "openrlhf"):
            raise ValueError(f"engine must be 'local' or 'openrlhf', got {engine!r}")
        self.dir, self.method, self.seed, self.engine = Path(root), method, seed, engine

    def __fspath__(self) -> str:
        return str(self.dir)

    @property
    def metrics(self) -> Path:
        return self.dir / "metrics.parquet"

    @property
    def final(self) -> Path:
        return self.dir / "final"

    @property
    def rollouts(self) -> Path:
        """One row per trained rollout (prompt id, policy step, reward, length): V0's harvest."""
        return self.dir / "rollouts.parquet"

    @property
    def eval(self) -> Path:
        return self.dir / "eval.parquet"

    @property
    def eval_dir(self) -> Path:
        """Per-checkpoint evaluation tables (`eval_dir / f"{label}.parquet"`)."""
        return self.dir / "eval"

    @property
    def state(self) -> Path:
        """The local trainer's resume state (model, optimiser, RNG, buffers)."""
        return self.dir / "ckpt" / "last.pt"

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints" if self.engine == "local" else self.openrlhf / "ckpt"

    @staticmethod
    def checkpoint_label(step: int) -> str:
        return f"step{int(step):05d}"

    def checkpoint(self, step: int) -> Path:
        """The HF model directory saved at `step` by this run's engine."""
        if self.engine == "local":
            return self.checkpoints / self.checkpoint_label(step)
        return self.checkpoints / f"global_step{int(step)}_hf"

    # the OpenRLHF engine's working files
    @property
    def openrlhf(self) -> Path:
        return self.dir / "openrlhf"

    @property
    def prompts(self) -> Path:
        return self.openrlhf / "prompts.jsonl"

    @property
    def tensorboard(self) -> Path:
        """TensorBoard event files: OpenRLHF's logger dir, or the local trainer's scalars (the
        metrics.parquet names; written when `tensorboard` is installed)."""
        return self.dir / "tensorboard" if self.engine == "local" else self.openrlhf / "tensorboard"

    @property
    def args(self) -> Path:
        return self.openrlhf / "args.json"


# config readers the layout uses, also for code that reads settings without a layout (figures)
def benchmark_names(cfg: dict) -> list[str]:
    """The names of the config's `tasks.benchmarks`, in its order."""
    return [b if isinstance(b, str) else b["name"] for b in cfg["tasks"].get("benchmarks", [])]


def world_policies(cfg: dict) -> list[str]:
    """The policies of the world report: `world.policies`, else the RL start policy, else the
    first policy of the config."""
    refs = (cfg.get("world") or {}).get("policies")
    if refs:
        return list(refs)
    return [cfg["rl"]["policy"]] if cfg.get("rl") else list(cfg["policies"])[:1]


def pretrained_policies(cfg: dict) -> list[str]:
    """The policies the config pre-trains (source pretrain)."""
    return [n for n, p in cfg["policies"].items() if p["source"] == "pretrain"]


class Paths:
    def __init__(self, cfg: dict, root: str | Path = "."):
        self.cfg = cfg
        self.root = Path(root)
        self.scale = cfg["scale"]
        self.results = self.root / setting(cfg, "results_dir") / self.scale
        self.figures = self.root / setting(cfg, "figures_dir") / self.scale

    def stage(self, stage: str, *parts: str) -> Path:
        return self.results.joinpath(stage, *parts)

    def for_config(self, cfg: dict) -> "Paths":
        """Another config's tree under this root: a start policy's tree of `head_to_head.pool`."""
        return Paths(cfg, self.root)

    # the layouts of the studies, the OOD stage and Le Critique's world, resolved with this tree
    @property
    def studies(self) -> "StudyPaths":
        return StudyPaths(self)

    @property
    def ood(self) -> "OODPaths":
        return OODPaths(self)

    @property
    def critique(self) -> "CritiquePaths":
        return CritiquePaths(self)

    # data
    def train_pool(self) -> Path:
        return self.stage("tasks", "train_pool.parquet")

    def pretrain_corpus(self) -> Path:
        return self.stage("tasks", "pretrain_corpus.parquet")

    def benchmark(self, name: str) -> Path:
        return self.stage("tasks", "benchmarks", f"{name}.parquet")

    def validation_split(self) -> Path:
        """Pool-side problems in neither the pool, the corpus nor a benchmark: the split the
        learning rates are tuned on (`sparserl make-validation`, rl.lr_tuning)."""
        return self.stage("tasks", "validation.parquet")

    def tuning(self, *parts: str) -> Path:
        """The learning-rate tuning's runs and tables (`sparserl.engines.lr_tuning`), never under rl/."""
        return self.stage("tuning", *parts)

    def benchmark_names(self) -> list[str]:
        return benchmark_names(self.cfg)

    # policies
    def tokenizer(self) -> Path:
        return self.stage("tokenizer")

    def policy(self, ref: str) -> Path:
        """Checkpoint directory of a policy ref: pre-trained ones under the stage, hub ones their
        local copy (`hub_model_dir`, rule fetch_models)."""
        name, snap = split_policy(ref)
        pol = self.cfg["policies"][name]
        if pol["source"] == "hub":
            if snap:
                raise ValueError(f"policy ref {ref!r}: hub policies have no snapshots")
            return hub_model_dir(pol["hf_name"], self.root)
        return self.stage("policies", ref)

    def hub_models(self) -> dict[str, Path]:
        """Every hub model the config names -> its local directory: the policies with source hub,
        Le Critique's hub policies (critique.policy_hub and the experiments' own) and the extra
        models of `models.hub` (e.g. V0's embedder, at the path v0.embedder.path names)."""
        out: dict[str, Path] = {}
        names = [p["hf_name"] for p in self.cfg["policies"].values() if p["source"] == "hub"]
        c = self.cfg.get("critique") or {}
        names += [c.get("policy_hub")] + [e.get("policy_hub") for e in (c.get("experiments") or {}).values()]
        for n in names:
            if n:
                out.setdefault(n, hub_model_dir(n, self.root))
        for m in (self.cfg.get("models") or {}).get("hub", []):
            out[m["hf_name"]] = self.root / m["path"] if m.get("path") else hub_model_dir(m["hf_name"], self.root)
        return out

    def reference_cache_shard(self, ref: str, shard: int | str, shards: int | str) -> Path:
        """Job `shard` of `shards` of the reference cache (rule reference_cache_shard)."""
        return self.stage("basis", "reference", "shards", ref, f"{shard}-of-{shards}.parquet")

    def pretrain_state(self, name: str) -> Path:
        return self.stage("policies", "_state", name)

    def passrate(self, name: str) -> Path:
        return self.stage("policies", f"{name}.passrate.json")

    def passrate_cache(self, name: str) -> Path | None:
        """The cached rollouts policy `name`'s pass rates are read from instead of rolling the
        pool out again, or None: the BASIS reference cache of the RL start policy rolls out the
        same pool with the same `passrate` sampling settings, at least `passrate.samples` times."""
        rl, basis = self.cfg.get("rl") or {}, self.cfg.get("basis") or {}
        if rl.get("policy") != name or not basis:
            return None
        if setting(self.cfg, "basis", "reference_n") < setting(self.cfg, "passrate", "samples"):
            return None
        return self.reference_cache(name)

    def world_report(self) -> Path:
        """Greedy vs sampled accuracy on the pool and the benchmarks, and their overlap."""
        return self.stage("policies", "world.json")

    def world_policies(self) -> list[str]:
        return world_policies(self.cfg)

    def passrates(self) -> Path:
        return self.stage("policies", "passrates.json")

    def pretrained_policies(self) -> list[str]:
        return pretrained_policies(self.cfg)

    def snapshot_tags(self) -> list[str]:
        return [snapshot_tag(f) for f in self.cfg.get("pretrain", {}).get("snapshots", [])]

    def snapshot_refs(self, name: str) -> list[str]:
        return [f"{name}@{t}" for t in self.snapshot_tags()]

    # BASIS reference-rollout cache and oracle values
    def reference_cache(self, ref: str) -> Path:
        return self.stage("basis", "reference", f"{ref}.parquet")

    def oracle(self, ref: str) -> Path:
        return self.stage("basis", "oracle", f"{ref}.parquet")

    def checkpoint_oracle(self, method: str, seed: int | str, label: str) -> Path:
        """Oracle of one RL checkpoint (label `step00015` or `final`) for the BASIS value study."""
        return self.stage("basis", "oracle", "rl", method, f"seed{seed}", f"{label}.parquet")

    # evaluation
    def eval_table(self, ref: str) -> Path:
        return self.stage("eval", ref, "eval.parquet")

    def pass_at_k_curve(self, ref: str) -> Path:
        """A policy's unbiased pass@k curve, k = 1, 2, 4, ... (`sparserl.evaluation.pass_at_k`)."""
        return self.stage("eval", ref, "eval_pass_at_k.parquet")

    def eval_summary(self) -> Path:
        return self.stage("eval", "summary.parquet")

    def figure_dir(self, paper: str) -> Path:
        return self.figures / paper

    # value models (V0, the Le Critique critics): the rollouts harvested to train them (from the
    # RL runs' rollouts.parquet), the trained models, and their evaluation tables
    def harvest(self, name: str) -> Path:
        return self.stage("values", "harvest", f"{name}.parquet")

    def harvest_table(self) -> Path:
        """Every harvested policy in one long table (V0's training and evaluation data)."""
        return self.stage("values", "harvest.parquet")

    def harvest_run(self, policy: str) -> Path:
        """The GRPO run of `policy` that V0's harvest checkpoints (a RunPaths root)."""
        return self.stage("values", "harvest", "runs", policy)

    def value_model(self, name: str) -> Path:
        return self.stage("values", "models", name)

    def v0_embeddings(self, kind: str) -> Path:
        """Every harvest prompt's token states under V0's embedder `kind` (rule v0_embeddings):
        computed once, read by Tables 1, 2 and 6 and routing."""
        return self.value_model("v0") / f"embeddings.{kind}.pt"

    def v0_pool_embeddings(self, kind: str) -> Path:
        """The RL pool's prompts under V0's embedder `kind`, beside the prior's model (rule
        v0_pool_embeddings): read by every run and study with V0's prior."""
        return self.value_model("v0") / f"pool_embeddings.{kind}.pt"

    def v0_prior_model(self) -> Path:
        """The trained V0 that the 'v0' prior of V0.5's methods loads (sequential protocol, seed 0)."""
        return self.value_model("v0") / "v0.sequential.seed0.pt"

    def value_eval(self, name: str) -> Path:
        return self.stage("values", "eval", f"{name}.parquet")

    def v0_official(self, name: str = "metrics.parquet") -> Path:
        """V0 and its baselines on the V0 paper's released sample (`sparserl v0-official`)."""
        return self.stage("values", "v0_official", name)

    # RL runs
    def run(self, method: str, seed: int | str) -> RunPaths:
        """The files of one RL run. Snakemake rules pass wildcards: run("{method}", "{seed}")."""
        return RunPaths(self.stage("rl", method, f"seed{seed}"), method, seed, engine=rl_engine(self.cfg))

    def rl_runs(self) -> Path:
        return self.stage("rl", "runs.parquet")

    def rl_summary(self) -> Path:
        return self.stage("rl", "summary.parquet")

    def world_compare(self) -> Path:
        """The run's RL gains as Markdown (`sparserl world-compare`, rule world_compare): what
        docs/world.md points to instead of typing numbers."""
        return self.stage("report", "world_compare.md")

    # the claims table of the four papers (`sparserl claims`, sparserl.studies.claims)
    def claims_md(self) -> Path:
        return self.figures / "CLAIMS.md"

    def claims_csv(self) -> Path:
        return self.figures / "CLAIMS.csv"

    def results_md(self) -> Path:
        """The reading of the claims and the ranking (`sparserl reading`, sparserl.studies.reading):
        what docs/results_<scale>.md copies."""
        return self.figures / "RESULTS.md"

    def head_to_head(self, name: str = "ranking") -> Path:
        """A table of the head-to-head of every RL method (`sparserl head-to-head`): ranking, pairs, curves."""
        return self.stage("head_to_head", f"{name}.parquet")



class StudyPaths:
    """Every path of the studies: raw simulation tables under results/{scale}/studies/, tables and
    summaries under paper_figures/{scale}/{basis,v05}/ (beside the figures drawn from them)."""

    def __init__(self, P: Paths):
        self.P = P

    def basis_batches(self, prefix: str = "") -> Path:
        """Raw batches of the BASIS value study; prefix "stress_": the snapshot-pair stress test."""
        return self.P.stage("studies", f"{prefix}basis_value_batches.parquet")

    def v05_runs(self) -> Path:
        return self.P.stage("studies", "v05_osla_runs.parquet")

    def table(self, paper: str, name: str) -> Path:
        return self.P.figure_dir(paper) / f"{name}.parquet"

    def csv(self, paper: str, name: str) -> Path:
        return self.P.figure_dir(paper) / f"{name}.csv"

    def summary(self, paper: str, prefix: str = "") -> Path:
        return self.P.figure_dir(paper) / f"{prefix}summary.json"


class OODPaths:
    """Every file of the OOD stage: ``results/{scale}/ood/``."""

    def __init__(self, P: Paths):
        self.dir = P.stage("ood")

    def table(self) -> Path:
        return self.dir / "ood.parquet"

    def task(self, name: str) -> Path:
        return self.dir / "tasks" / f"{name}.parquet"

    def harness(self, label: str, tool: str, dataset: str | None = None) -> Path:
        """One harness's JSON for one policy (paper scale): lm_eval.json, evalplus_<dataset>.json."""
        name = "lm_eval.json" if tool == "lm_eval" else f"evalplus_{dataset}.json"
        return self.dir / "harness" / label / name


WORLD_POLICY = "c"  # Le Critique's pre-trained policy (its world's only one)


def critique_cfg(cfg: dict) -> dict:
    c = cfg.get("critique")
    if not c:
        raise ValueError("the config has no 'critique' section (Le Critique's envs and experiments)")
    return c


def critique_world(cfg: dict) -> dict:
    """A config for the math stage's tokenizer/pre-training code, rooted at results/{scale}/critique.
    At paper scale (`critique.policy_hub`) the world's policy is that hub model: no corpus, no
    tokenizer, no pre-training."""
    c = critique_cfg(cfg)
    policy = ({"source": "hub", "hf_name": c["policy_hub"]} if c.get("policy_hub")
              else {"source": "pretrain", **c["policy"]})
    return {"scale": f"{cfg['scale']}/critique", "results_dir": setting(cfg, "results_dir"),
            "figures_dir": setting(cfg, "figures_dir"), "seed": cfg["seed"],
            "tasks": {"source": "critique", "prompt_template": "{problem}", "answer_template": "{answer}",
                      "envs": c["envs"], "corpus": c.get("corpus")},
            "tokenizer": c.get("tokenizer"), "policies": {WORLD_POLICY: policy},
            "pretrain": c.get("pretrain", cfg.get("pretrain", {})), "rollout": cfg["rollout"]}


class CritiquePaths:
    """results/{scale}/critique/...: the world (tasks, tokenizer, policy c) and the runs."""

    def __init__(self, P: Paths):
        self.cfg = P.cfg
        self.world = Paths(critique_world(P.cfg), P.root)
        self.root = self.world.results

    def corpus(self):
        return self.world.pretrain_corpus()

    def tokenizer(self):
        return self.world.tokenizer()

    def policy(self, exp: str | None = None):
        """Policy c's checkpoint dir (tiny/small), or the hub model's local copy at paper scale
        (`critique.policy_hub`, or experiment `exp`'s own `policy_hub`)."""
        if exp is not None:
            known = critique_cfg(self.cfg).get("experiments") or {}
            if exp not in known:
                raise ValueError(f"critique.experiments has no {exp!r}; known: {list(known)}")
            own = known[exp].get("policy_hub")
            if own:  # its local copy (rule fetch_models), as the world's own hub policy
                return hub_model_dir(own, self.world.root)
        return self.world.policy(WORLD_POLICY)

    def run(self, exp: str, method: str, seed) -> RunPaths:
        return RunPaths(self.root / "runs" / exp / method / f"seed{seed}", method, seed)

    def runs_table(self):
        """Every run's per-step metrics in one long table (the figures read it)."""
        return self.root / "runs.parquet"

    def final_table(self):
        """One row per run (final and held-out rewards, EV, rho)."""
        return self.root / "final.parquet"

    def start_eval(self, env: str):
        return self.root / "start_eval" / f"{env}.json"
