"""One RL run, resolved once: a frozen `Run` that the DAG's rules, the trainers and the engines'
launchers take instead of re-deriving the run from (config, method name, seed).

`resolve_run(cfg, method, seed)` is an RL run of the scale (results/<scale>/rl/<owner>/seed<s>);
`root` places a run elsewhere (the lr tuning's runs, V0's harvest runs), `lr` fixes its rate
(a tuning grid point). `resolve_critique_run` is one of Le Critique's runs.

`run.key` is the run's one identity hash: everything its result depends on besides its input
files (the rl settings without the run lists, the rollout settings, the method spec, the BASIS
value study's extra checkpoints). The rule that trains the run has it as its param, so a change
reruns the job, and the trainer stores it in its resume state and starts over on another. The
tuned lr (rl.lr_tuning) is no part of it: the DAG keys a run before tuning/lr.json exists, and
that file is the run's input; the trainer checks the lr it resumes by value.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from sparserl.core.artifacts import config_hash
from sparserl.core.paths import Paths, RunPaths, rl_engine
from sparserl.methods.lr_choice import base_lr, chosen_path, tuned_run
from sparserl.methods.lr_choice import settings as tuning_settings
from sparserl.methods.spec import (MethodSpec, load_method, prompts_per_step, run_owners, run_settings,
                                   snapshot_steps, study_snapshot_steps, total_steps, with_critic_lr)


@dataclass(frozen=True)
class RunInputs:
    """The files a run reads, by what they are (`Run.inputs` lists them for its rule)."""
    policy: Path  # the start policy's checkpoint folder
    pool: Path | None = None  # the training pool (Le Critique's runs draw their env's problems)
    reference_cache: Path | None = None  # BASIS's, the oracle prior's
    v0_model: Path | None = None  # the 'v0' prior's trained V0
    v0_embeddings: Path | None = None  # the pool's prompts under V0's embedder
    lr_choice: Path | None = None  # rl.lr_tuning's chosen rates

    def files(self) -> tuple[str, ...]:
        return tuple(str(f) for f in dataclasses.astuple(self) if f is not None)


@dataclass(frozen=True)
class Run:
    """One run: what trains, where, from which files, under which key."""
    spec: MethodSpec  # the method trained (its owner's spec; Le Critique: K from the experiment)
    method: str  # the name asked for
    seed: int
    owner: str  # the method whose folder holds the run (`run_owners`: a repeated spec trains once)
    settings: dict  # the run's rl settings (`run_settings`: no run lists)
    lr: float | None  # None: tuned, not read yet (`resolve_run(read_choice=False)`)
    lr_source: str  # "fixed" (rl.lr, or the rate given) or "tuned" (rl.lr_tuning's choice)
    steps: int | None  # None as lr
    prompts_per_step: int
    snapshot_steps: tuple[int, ...]  # intermediate checkpoints kept and evaluated (rl.eval_fractions)
    study_steps: tuple[int, ...]  # more kept, not evaluated: the BASIS value study's (basis.study_checkpoints)
    paths: RunPaths
    reads: RunInputs  # the files the run reads
    identity: dict  # what `key` hashes
    key: str
    experiment: str | None = None  # Le Critique's experiment (`resolve_critique_run`)

    @property
    def dir(self) -> Path:
        return self.paths.dir

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files the run reads: its rule's input."""
        return self.reads.files()


def run_identity(cfg: dict, spec: MethodSpec, settings: dict, study: list[int], seed: int | None) -> dict:
    """The settings `Run.key` hashes: `spec` as its file says (a scale's critic lr is in
    `settings`). `seed`: only for a run whose folder need not name it (`root`)."""
    out = {"rl": settings, "rollout": cfg["rollout"], "method": spec.to_dict()}
    # the run the BASIS value study reads keeps extra checkpoints: asking for them reruns that
    # run alone; every other run's key is unchanged
    if study:
        out["study_snapshots"] = list(study)
    if seed is not None:
        out["seed"] = int(seed)
    return out


def run_inputs(cfg: dict, spec: MethodSpec, tuned: bool) -> RunInputs:
    """The files a run of `spec` reads: the start policy, the pool, the reference cache (BASIS,
    the oracle prior), V0 and the pool's embeddings (the 'v0' prior) and the tuned rates."""
    P = Paths(cfg)
    policy = cfg["rl"]["policy"]
    v0 = {}
    if spec.needs_v0_model:  # trained on the harvest (workflow/rules/values.smk)
        from sparserl.values.v0.settings import v0_settings
        v0 = {"v0_model": P.v0_prior_model(),
              "v0_embeddings": P.v0_pool_embeddings(v0_settings(cfg)["embedder"]["kind"])}
    return RunInputs(policy=P.policy(policy), pool=P.train_pool(),
                     reference_cache=P.reference_cache(policy) if spec.needs_reference_cache else None,
                     lr_choice=chosen_path(P) if tuned else None, **v0)


def layout(cfg: dict) -> Paths:
    """The results tree of `cfg`, for a command that reads what its rule did not pass: a table of
    every run (`rl-summary`, the studies, the claims), or a command typed by hand. The rules pass
    a job's own files; this and the resolvers below are the only places outside `core` that lay
    the tree out."""
    return Paths(cfg)


def owner_of(cfg: dict, method: str) -> str:
    """The method whose run holds `method`'s: the first of rl.methods with its spec (`run_owners`),
    or `method` itself when it is not listed."""
    rl = cfg["rl"]
    if method not in rl.get("methods", []):
        return method
    return run_owners(rl["methods"], rl.get("rollouts_per_step")).get(method, method)


def method_run(cfg: dict, method: str, seed: int | str) -> RunPaths:
    """The `RunPaths` that hold `method`'s run in the tree of `cfg`: its owner's (`owner_of`)."""
    return run_paths(Paths(cfg), method, seed)


def run_paths(P: Paths, method: str, seed: int | str) -> RunPaths:
    """The `RunPaths` that hold `method`'s run in tree `P`: its owner's (`owner_of`)."""
    return P.run(owner_of(P.cfg, method), seed)


def resolve_run(cfg: dict, method: str, seed: int | str, root: str | Path | None = None,
                lr: float | None = None, read_choice: bool = True) -> Run:
    """The run of `method` at `seed` under `cfg`. `root`: its folder when it lives elsewhere than
    rl/<owner>/seed<s> (the tuning's, V0's harvest's; it then trains `method` itself, at the
    config's horizon, and the key holds the seed). `lr`: a fixed rate (a tuning grid point), else
    rl.lr, or rl.lr_tuning's choice for the method's setting. `read_choice` False leaves a tuned
    lr and steps unread (None): the DAG keys a run before tuning/lr.json exists."""
    rl = cfg["rl"]
    seed = int(seed)
    owner = method if root is not None else owner_of(cfg, method)
    named = load_method(owner)
    spec = with_critic_lr(named, rl)  # the scale's critic lr (rl.critic_lr, in `settings` too)
    settings = run_settings(rl, spec)
    tuned = root is None and lr is None and tuning_settings(cfg) is not None
    if lr is not None:
        settings = {**settings, "lr": float(lr)}
        run_lr, source, steps = float(lr), "fixed", total_steps(rl, spec)
    elif not tuned:
        run_lr, source, steps = base_lr(cfg), "fixed", total_steps(rl, spec)
    elif not read_choice:
        run_lr, source, steps = None, "tuned", None
    else:
        run_lr, source, steps = tuned_run(cfg, spec, chosen_path(Paths(cfg)))
    # the BASIS value study reads rl/<method>/seed<s> only
    study = study_snapshot_steps(cfg, spec, seed) if root is None else []
    engine = rl_engine(cfg)
    paths = (Paths(cfg).run(owner, seed) if root is None
             else RunPaths(Path(root), owner, seed, engine=engine))
    identity = run_identity(cfg, named, settings, study, seed if root is not None else None)
    return Run(spec=spec, method=method, seed=seed, owner=owner, settings=settings, lr=run_lr,
               lr_source=source, steps=steps, prompts_per_step=prompts_per_step(spec, rl["rollouts_per_step"]),
               snapshot_steps=tuple(snapshot_steps(rl, spec)), study_steps=tuple(study), paths=paths,
               reads=run_inputs(cfg, spec, tuned), identity=identity, key=config_hash(identity))


def placed(run: Run, folder: str | Path) -> Run:
    """`run` with its files in `folder` (the folder of its rule's output): the same key and inputs."""
    return dataclasses.replace(run, paths=RunPaths(Path(folder), run.owner, run.seed, engine=run.paths.engine))


def resolve_critique_run(cfg: dict, exp: str, method: str, seed: int | str, root: str | Path | None = None,
                         policy: str | Path | None = None) -> Run:
    """One of Le Critique's runs (experiment x method x seed; `engines.local.critique`, and
    `engines.openrlhf.critique` at paper scale): the method with the experiment's K and the scale's
    critic lr, trained on the experiment's rl settings (critique.rl with its own overrides). Its
    key is the one each engine's DAG has keyed these runs by. `root` and `policy`: the run's folder
    and start policy as the DAG resolved them (`critique-train`), else `CritiquePaths`'."""
    from sparserl.envs.world import critique_cfg, experiment, experiment_rl
    from sparserl.core.paths import Paths
    seed = int(seed)
    e = experiment(cfg, exp)
    rl = experiment_rl(cfg, exp)
    base = load_method(method)
    spec = with_critic_lr(dataclasses.replace(base, group_size=e.k), rl)  # K comes from the experiment
    c = critique_cfg(cfg)
    CP = Paths(cfg).critique
    engine = rl_engine(cfg)  # OpenRLHF's runs keep its working files under openrlhf/ (`RunPaths`)
    if engine == "local":
        identity = {"rl": c["rl"], "env": c["envs"][e.env], "k": e.k, "method": base.to_dict(),
                    "rollout": cfg["rollout"], **({"exp_rl": e.rl} if e.rl else {})}  # an experiment's own rl
        policy = CP.policy() if policy is None else Path(policy)
    else:
        policy = CP.policy(exp) if policy is None else Path(policy)
        identity = {"rl": rl, "env": c["envs"][e.env], "k": e.k, "method": base.to_dict(), "policy": str(policy)}
    return Run(spec=spec, method=method, seed=seed, owner=method, settings=rl, lr=float(rl["lr"]),
               lr_source="fixed", steps=int(rl["steps"]),
               prompts_per_step=prompts_per_step(spec, int(rl["rollouts_per_step"])), snapshot_steps=(),
               study_steps=(), paths=RunPaths(CP.run(exp, method, seed).dir if root is None else Path(root), method, seed,
                                              engine=engine),
               reads=RunInputs(policy=Path(policy)), identity=identity,
               key=config_hash(identity), experiment=exp)
