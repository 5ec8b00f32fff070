"""RL method specs (`configs/methods/<name>.yaml`): one file per method, scale-free, loaded once
into a typed, frozen `MethodSpec` with every default filled in here and nowhere else.

A method names an estimator from `sparserl.estimators`, its rollouts per prompt, its policy loss
and optional pieces (DAPO's dynamic sampling and overlong shaping, V0.5's prior and OSLA, BASIS's
refinement). The scale config says how many rollouts a step consumes; prompts per step are
`rollouts_per_step / group_size`, so every method sees the same rollout budget per step (the
BASIS table's 512 = 64 x 8 = 512 x 1; V0.5's batch x k_init = GRPO-16's batch x 16). A method
with `prompts_per_step: N` is on the matched-prompts protocol instead: N prompts a step whatever
the scale's rollouts_per_step, so its rollouts grow with its group size (OSLA: N prompts, a
variable number of rollouts each).

What an engine does with a spec never depends on the method's name: the estimator's registered
`needs` say which side data to build (`sparserl.methods.sidedata`), `spec.sampler` says how to
sample (`sparserl.methods.sampling`), `spec.needs_reference_cache` whether the reference rollouts
are read.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from sparserl.core.config import (ConfigError, load_schema, nonfinite_message, nonfinite_numbers, read_yaml,
                                  schema_default, schema_default_by, section_setting)

METHODS_DIR = Path(__file__).resolve().parents[3] / "configs" / "methods"

MAX_STEPS = 2 ** 31 - 1  # a run's step count must fit an int32 (checkpoint names, TensorBoard steps)
SAMPLERS = ("plain", "dynamic_sampling", "osla", "budget")


def _d(*keys: str):
    """A method file's default: `$defs/method` of the config schema (core/config.schema.yaml),
    the one home of every method setting's default and its description."""
    return schema_default("$defs", "method", *keys)


@functools.lru_cache(maxsize=1)
def method_schema() -> dict:
    """The JSON Schema a method file is validated against: `$defs/method`, with the $defs it uses."""
    root = load_schema()
    return {**root["$defs"]["method"], "$defs": root["$defs"]}


OSLA_C = _d("osla", "c")  # V0.5's cost per rollout (V0.5 Section 4.1.3)

@dataclass(frozen=True)
class LossSpec:
    type: str
    clip_low: float | None = None
    clip_high: float | None = None
    agg: str = _d("loss", "agg")

    def options(self) -> dict:
        """Keyword options of the local trainer's loss function (`engines.local.losses.LOSSES`)."""
        out = {"agg": self.agg}
        if self.type != "gpg":
            out.update(clip_low=self.clip_low, clip_high=self.clip_high)
        return out


@dataclass(frozen=True)
class OslaSpec:
    """V0.5's sequential OSLA allocation (arXiv 2603.10848, Theorem 3.6 and Section 4.1.3)."""
    k_init: int
    k_step: int = _d("osla", "k_step")
    c: float = _d("osla", "c")
    k_max: int = _d("osla", "k_max")  # 0: floor(1 / sqrt(c)), resolved on load
    global_stop: float = _d("osla", "global_stop")
    pad_multiple: int | None = _d("osla", "pad_multiple")
    # [our choice, not the paper's] a cap on a step's rollouts, round 0 included, so OSLA can be
    # compared at the fixed-k methods' rollout budget (`osla_sampler.run_osla`'s max_rollouts)
    max_rollouts_per_step: int | None = _d("osla", "max_rollouts_per_step")


@dataclass(frozen=True)
class PriorSpec:
    """Which prior (`sparserl.values.priors`) V0.5 fuses with: kind and its options."""
    kind: str
    p: float = _d("prior", "p")  # constant prior
    offset: float = _d("prior", "offset")  # oracle prior: known offset delta on the V = 2p - 1 scale
    pseudo_count: float = _d("prior", "pseudo_count")  # oracle prior: Beta(a, a) pseudo-count

    @property
    def static(self) -> bool:
        """A static prior's p per prompt is fixed before training (it can travel in dataset
        labels); any other kind is queried during training with the support buffer as context."""
        return self.kind in ("oracle", "constant")


@dataclass(frozen=True)
class SupportSpec:
    size: int = _d("support_buffer", "size")  # V0.5: the 512 most recent (prompt, reward) pairs ...
    context: int = _d("support_buffer", "context")  # ... of which 256 are the prior's context


@dataclass(frozen=True)
class DynamicSamplingSpec:
    enabled: bool = _d("dynamic_sampling", "enabled")
    gen_batch_factor: float = _d("dynamic_sampling", "gen_batch_factor")


@dataclass(frozen=True)
class BudgetSpec:
    """V0's dynamic budget allocation (V0 §5): per step, rollouts per prompt B_i maximise
    sum_i U(B_i, p_i) under the step's total (`estimators.budget.allocate_budget`), p_i from the prior."""
    b_min: int = _d("budget", "b_min")
    b_max: int = _d("budget", "b_max")


@dataclass(frozen=True)
class OverlongSpec:
    enabled: bool = _d("overlong", "enabled")
    buffer_fraction: float = _d("overlong", "buffer_fraction")
    penalty: float = _d("overlong", "penalty")


@dataclass(frozen=True)
class BasisSpec:
    kind: str | None = _d("basis", "kind")
    calibrate_on: str = _d("basis", "calibrate_on")
    inactive: str = _d("basis", "inactive")
    beta: float | str | None = _d("basis", "beta")  # a number, "inf", or None / "calibrate" (grid search)

    def fixed_beta(self) -> float | None:
        """The fixed beta, or None when beta is calibrated on the batch."""
        b = self.beta
        if b is None or (isinstance(b, str) and b.strip().lower() in ("calibrate", "auto", "")):
            return None
        try:
            beta = float(b)  # "inf" -> inf
        except ValueError:
            raise ConfigError(f"key 'basis.beta': {b!r} is neither a number, 'inf' nor 'calibrate'") from None
        # V*_beta (BASIS Eq. 4) is a temperature: beta > 0, +inf its documented limit (V* = phat)
        if not beta > 0:
            raise ConfigError(f"key 'basis.beta': {b!r} is not a positive number; set a beta > 0, "
                              "'inf' (V* = phat) or 'calibrate' (grid search on the batch)")
        return beta


@dataclass(frozen=True)
class CriticSpec:
    """Le Critique's trained value model (Section 4.1, Appendix B): a copy of the policy with a new
    scalar head, trained by binary cross-entropy on p in [0, 1] from a FIFO replay of evaluated
    trajectories (each used at most `replay_reuse` times), after `warmup_updates` value updates
    before the first policy update. Values are computed before the batch enters the replay, so no
    advantage comes from a critic trained on its own trajectories.

    lam_gae / lam_target: Monte Carlo (1.0) by default; lam_gae "auto" is 0.4^(1/L) with L the
    run's response length (the paper's 0.999888 = 0.4^(1/8192), Section 7.2)."""
    privileged: str = _d("critic", "privileged")  # none (VF) | answer | loo_group (Pvf), `values.critic_inputs`
    lam_gae: float | str = _d("critic", "lam_gae")
    lam_target: float = _d("critic", "lam_target")
    warmup_updates: int = _d("critic", "warmup_updates")
    replay_reuse: int = _d("critic", "replay_reuse")
    lr: float = _d("critic", "lr")  # [our choice] tiny: the policy's RL lr; the paper's table is lost (Table 2)
    updates_per_step: int = _d("critic", "updates_per_step")

    def gae_lambda(self, response_length: int) -> float:
        """lam_gae as a number: "auto" -> 0.4 ** (1 / response_length)."""
        lam = self.lam_gae
        if isinstance(lam, str):
            if lam.strip().lower() != "auto":
                raise ConfigError(f"critic.lam_gae: {lam!r} is neither a number in [0, 1] nor 'auto'")
            return 0.4 ** (1.0 / max(1, int(response_length)))
        if not 0.0 <= float(lam) <= 1.0:
            raise ConfigError(f"critic.lam_gae: {lam!r} must lie in [0, 1] (or be 'auto')")
        return float(lam)


@dataclass(frozen=True)
class MethodSpec:
    name: str
    estimator: str
    group_size: int
    loss: LossSpec
    kl_coef: float = _d("kl_coef")
    steps_factor: float = _d("steps_factor")
    prompts_per_step: int | None = None  # matched-prompts protocol; None: rollouts_per_step / group_size
    dynamic_sampling: DynamicSamplingSpec = field(default_factory=DynamicSamplingSpec)
    overlong: OverlongSpec = field(default_factory=OverlongSpec)
    osla: OslaSpec | None = None
    prior: PriorSpec | None = None
    support: SupportSpec = field(default_factory=SupportSpec)
    basis: BasisSpec = field(default_factory=BasisSpec)
    budget: BudgetSpec | None = None
    critic: CriticSpec | None = None

    @property
    def needs(self) -> frozenset:
        """The side data the estimator declared where it is registered."""
        from sparserl.estimators import get_spec
        return get_spec(self.estimator).needs

    @property
    def sampler(self) -> str:
        """How a step samples: 'osla' rounds, DAPO's 'dynamic_sampling', or 'plain'."""
        if self.osla is not None:
            return "osla"
        if self.budget is not None:
            return "budget"
        return "dynamic_sampling" if self.dynamic_sampling.enabled else "plain"

    @property
    def needs_prior(self) -> bool:
        """The estimator fuses a prior, or OSLA or the budget allocation spends rollouts by one."""
        return "prior" in self.needs or self.osla is not None or self.budget is not None

    @property
    def needs_v0_model(self) -> bool:
        """The 'v0' prior loads the trained V0 (`Paths.v0_prior_model`)."""
        return self.prior is not None and self.prior.kind == "v0"

    @property
    def needs_reference_cache(self) -> bool:
        """BASIS and the oracle prior read the starting policy's cached reference pass rates."""
        return "reference" in self.needs or (self.prior is not None and self.prior.kind == "oracle")

    @property
    def needs_critic(self) -> bool:
        """A token-level estimator reads per-token values: the engine trains a critic."""
        return "values" in self.needs

    def estimator_options(self, response_length: int | None = None) -> dict:
        """Keyword options the method passes to its registry estimator (both engines); GAE's
        lambda needs the run's response length when lam_gae is "auto"."""
        if "reference" in self.needs:
            return {"inactive": self.basis.inactive}
        if self.estimator == "gae" and self.critic is not None:
            return {"gamma": 1.0, "lam": self.critic.gae_lambda(response_length or 1)}
        if self.estimator == "tether_bucketed" and response_length:
            return {"edges": bucket_edges(response_length)}
        return {}

    def to_dict(self) -> dict:
        """JSON-able, with every default filled in (OpenRLHF's --sparserl.spec, hashes). A method
        without a budget allocation, a critic, a fixed prompt count or an OSLA rollout cap leaves
        the key out, so its hash is what it was before they existed."""
        d = dataclasses.asdict(self)
        for k in ("budget", "critic", "prompts_per_step"):
            if d[k] is None:
                del d[k]
        if d["osla"] is not None and d["osla"]["max_rollouts_per_step"] is None:
            del d["osla"]["max_rollouts_per_step"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "MethodSpec":
        """Inverse of `to_dict` (also accepts a raw YAML mapping plus 'name')."""
        d = dict(d)
        if "support_buffer" in d:
            d["support"] = d.pop("support_buffer")
        return _build(d.pop("name", "method"), d)


def _build(name: str, raw: dict) -> MethodSpec:
    def sub(cls, key):
        v = raw.get(key)
        return None if v is None else cls(**v)

    loss = dict(raw["loss"])
    for k in ("clip_low", "clip_high"):  # PPO's, GSPO's or none (GPG), by loss type
        loss.setdefault(k, schema_default_by(loss["type"], "$defs", "method", "loss", k))
    osla = sub(OslaSpec, "osla")
    if osla is not None and not osla.k_max:
        from sparserl.estimators import osla_k_max
        osla = dataclasses.replace(osla, k_max=osla_k_max(osla.c))
    return MethodSpec(
        name=name, estimator=raw["estimator"], group_size=int(raw["group_size"]), loss=LossSpec(**loss),
        kl_coef=float(raw.get("kl_coef", _d("kl_coef"))),
        steps_factor=float(raw.get("steps_factor", _d("steps_factor"))),
        prompts_per_step=None if raw.get("prompts_per_step") is None else int(raw["prompts_per_step"]),
        dynamic_sampling=sub(DynamicSamplingSpec, "dynamic_sampling") or DynamicSamplingSpec(),
        overlong=sub(OverlongSpec, "overlong") or OverlongSpec(), osla=osla, prior=sub(PriorSpec, "prior"),
        support=sub(SupportSpec, "support") or SupportSpec(), basis=sub(BasisSpec, "basis") or BasisSpec(),
        budget=sub(BudgetSpec, "budget"), critic=sub(CriticSpec, "critic"))


def method_names(methods_dir: Path | None = None) -> list[str]:
    return sorted(p.stem for p in Path(methods_dir or METHODS_DIR).glob("*.yaml"))


def load_method(name: str, methods_dir: Path | None = None) -> MethodSpec:
    """Read, validate and type `configs/methods/<name>.yaml`; errors name the file, key and fix."""
    methods_dir = methods_dir or METHODS_DIR
    path = Path(methods_dir) / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"{path}: no such method; known: {', '.join(method_names(methods_dir))}")
    return _parse_method(name, str(path), path.read_bytes())


@functools.lru_cache(maxsize=512)
def _parse_method(name: str, where: str, text: bytes) -> MethodSpec:
    """The spec of a method file's bytes: a Snakefile resolves hundreds of runs, each reading its
    method (about 1 s of every workflow parse); keyed by content, so an edited file is read anew."""
    path = Path(where)
    raw = read_yaml(path, text) or {}  # a syntax error or a duplicate key names the file and line
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys (estimator, group_size, loss), "
                          f"got {type(raw).__name__}")
    for keys, value in nonfinite_numbers(raw):  # JSON Schema's minimum lets NaN through
        raise ConfigError(nonfinite_message(str(path), keys, value))
    errs = sorted(jsonschema.Draft202012Validator(method_schema()).iter_errors(raw),
                  key=lambda e: len(e.absolute_path))
    if errs:
        e = errs[0]
        key = ".".join(map(str, e.absolute_path)) or "<top level>"
        raise ConfigError(f"{path}: key '{key}': {e.message}; fix it in that file")
    return check_method(_build(name, raw), path)


def check_method(m: MethodSpec, where: Any = "<method>") -> MethodSpec:
    """Cross-key checks of a spec (the estimator exists, its side data can be had)."""
    from sparserl.estimators import list_estimators
    from sparserl.values.priors import PLANNED_PRIORS, PRIOR_REGISTRY

    if m.estimator not in list_estimators(None):
        raise ConfigError(f"{where}: key 'estimator': unknown estimator {m.estimator!r}; "
                          f"known: {', '.join(list_estimators(None))}")
    if m.needs_prior and m.prior is None:
        raise ConfigError(f"{where}: estimator {m.estimator!r} (or OSLA) needs a 'prior' "
                          f"(kind: {' | '.join(sorted(PRIOR_REGISTRY))}); add one")
    if m.prior is not None and m.prior.kind not in PRIOR_REGISTRY and m.prior.kind not in PLANNED_PRIORS:
        raise ConfigError(f"{where}: key 'prior.kind': unknown prior {m.prior.kind!r}; "
                          f"known: {', '.join(sorted(PRIOR_REGISTRY))}")
    if m.budget is not None and m.osla is not None:
        raise ConfigError(f"{where}: 'budget' and 'osla' are two ways to spend a step's rollouts; keep one")
    if m.budget is not None and not m.budget.b_min <= m.group_size <= m.budget.b_max:
        raise ConfigError(f"{where}: budget: group_size {m.group_size} (the mean rollouts per prompt) must lie "
                          f"in [b_min, b_max] = [{m.budget.b_min}, {m.budget.b_max}]")
    if m.osla is not None and m.osla.k_init != m.group_size:
        raise ConfigError(f"{where}: osla.k_init ({m.osla.k_init}) must equal group_size "
                          f"({m.group_size}), which sizes the prompt batch")
    try:
        m.basis.fixed_beta()  # a bad beta fails here, not mid-run
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}; fix it in that file") from None
    osla_cap_error(m, m.prompts_per_step, where)  # prompts_per_step itself: method_schema() (a positive integer)
    if m.osla is not None and m.osla.k_max < m.osla.k_init:
        raise ConfigError(f"{where}: osla: k_max {m.osla.k_max} (floor(1 / sqrt(c)) unless set) is below "
                          f"k_init {m.osla.k_init}; lower osla.c or raise osla.k_max")
    if m.needs_critic and m.critic is None:
        raise ConfigError(f"{where}: estimator {m.estimator!r} reads critic values; add a 'critic' "
                          f"mapping (e.g. critic: {{privileged: none}})")
    if m.critic is not None:
        if not m.needs_critic:
            raise ConfigError(f"{where}: 'critic' is set but estimator {m.estimator!r} reads no values "
                              f"(token-level: {', '.join(_token_estimators())}); drop it or change the estimator")
        m.critic.gae_lambda(1)  # a bad lambda fails here
    return m


def _token_estimators() -> list[str]:
    from sparserl.estimators import list_estimators
    return list_estimators("token")


def bucket_edges(response_length: int) -> tuple[int, ...]:
    """Token-bucketed Tether's edges at a response length L: the default edges' fractions of the
    paper's 8192 tokens (1/32, 1/16, ..., 1/2, `estimators.tether.DEFAULT_BUCKET_EDGES`) times L,
    as distinct positive integers [our choice: the paper gives no edges]."""
    from sparserl.estimators.tether import DEFAULT_BUCKET_EDGES
    return tuple(sorted({max(1, round(e * response_length / 8192)) for e in DEFAULT_BUCKET_EDGES}))


# rl keys that choose which runs exist, not what a run does
RUN_LIST_KEYS = ("methods", "seeds")


def run_settings(rl: dict, method: "MethodSpec | None" = None) -> dict:
    """The rl section as one run sees it: without the method and seed lists, so that adding a
    method to `rl.methods` neither reruns nor voids the resume state of the runs already there,
    and without `critic_lr` unless `method` trains a critic (the critic lr is no other run's)."""
    out = {k: v for k, v in rl.items() if k not in RUN_LIST_KEYS}
    if method is None or method.critic is None:
        out.pop("critic_lr", None)
    return out


def with_critic_lr(method: MethodSpec, rl: dict) -> MethodSpec:
    """The method with the scale's critic lr (`rl.critic_lr`; Le Critique: `critique.rl.critic_lr`)
    in place of its `critic.lr`; a method without a critic is returned as it is."""
    if method.critic is None or "critic_lr" not in rl:
        return method
    return dataclasses.replace(method, critic=dataclasses.replace(method.critic, lr=float(rl["critic_lr"])))


def total_steps(rl: dict, method: MethodSpec) -> int:
    """RL steps of a method (BASIS's grid entries train for a fraction of them)."""
    n = rl["steps"] * float(method.steps_factor)
    if not n <= MAX_STEPS:  # also NaN; round(inf) would raise a bare OverflowError
        raise ConfigError(f"rl.steps {rl['steps']} x steps_factor {method.steps_factor!r} of method "
                          f"'{method.name}' gives {n!r} steps, more than a run can hold ({MAX_STEPS}); "
                          f"lower steps_factor in configs/methods/{method.name}.yaml or rl.steps")
    return max(1, round(n))


def osla_round0(method: MethodSpec, n_prompts: int) -> int:
    """Rollouts of OSLA's round 0 on n_prompts prompts, as the rollout cap counts them: padded up
    to osla.pad_multiple when one is set (`osla_sampler.run_osla`)."""
    from sparserl.estimators import pad_to_multiple
    n = int(n_prompts) * method.osla.k_init
    return pad_to_multiple(n, method.osla.pad_multiple) if method.osla.pad_multiple else n


def osla_cap_error(method: MethodSpec, n_prompts: int | None, where: Any) -> None:
    """ConfigError when OSLA's rollout cap cannot hold round 0 (k_init rollouts of every prompt):
    the cap would bind before the rule's first decision. n_prompts None: one prompt."""
    o = method.osla
    if o is None or o.max_rollouts_per_step is None:
        return
    n = 1 if n_prompts is None else int(n_prompts)
    need = osla_round0(method, n)
    if o.max_rollouts_per_step < need:
        raise ConfigError(f"{where}: key 'osla.max_rollouts_per_step': {o.max_rollouts_per_step} is below "
                          f"round 0's {need} rollouts ({n} prompt(s) x k_init {o.k_init}"
                          f"{', padded to osla.pad_multiple' if o.pad_multiple else ''}); raise it to at least "
                          f"{need} or draw fewer prompts a step (prompts_per_step)")


def prompts_per_step(method: MethodSpec, rollouts_per_step: int) -> int:
    """Prompts a step samples: the method's `prompts_per_step` (matched-prompts protocol), else
    rollouts_per_step / group_size. A budget that is not a whole number of groups is refused,
    never rounded: fewer rollouts than one group would run a step of group_size rollouts, and
    flooring (12 with G=8 -> 8) would give this method a smaller budget than the others, both
    budgets the config never asked for."""
    where = f"configs/methods/{method.name}.yaml"
    if method.prompts_per_step is not None:
        osla_cap_error(method, method.prompts_per_step, where)
        return int(method.prompts_per_step)
    G = method.group_size
    if rollouts_per_step < G:
        raise ConfigError(f"rl.rollouts_per_step = {rollouts_per_step} is below the group_size "
                          f"{G} of method '{method.name}', so a step cannot draw one "
                          f"group; set rl.rollouts_per_step to a multiple of {G} "
                          f"(at least {G}) or drop '{method.name}' from rl.methods")
    if rollouts_per_step % G:
        lo = rollouts_per_step // G * G
        raise ConfigError(f"rl.rollouts_per_step = {rollouts_per_step} is not a multiple of the group_size "
                          f"{G} of method '{method.name}', so its steps would train "
                          f"{lo} rollouts, not {rollouts_per_step}; set rl.rollouts_per_step to a multiple of {G} "
                          f"(nearest: {lo} or {lo + G}) that every method in rl.methods divides, "
                          f"or drop '{method.name}' from rl.methods")
    osla_cap_error(method, rollouts_per_step // G, f"{where} (with rl.rollouts_per_step = {rollouts_per_step})")
    return rollouts_per_step // G


def fraction_step(fraction: float, n: int) -> int:
    """The step at `fraction` of a run of n steps (at least step 1)."""
    return max(1, round(float(fraction) * n))


def snapshot_steps(rl: dict, method: MethodSpec) -> list[int]:
    """Steps whose intermediate checkpoint is kept for evaluation (`rl.eval_fractions`)."""
    n = total_steps(rl, method)
    return sorted({fraction_step(f, n) for f in rl.get("eval_fractions", [])} - {n})


def study_snapshot_steps(cfg: dict, method: MethodSpec, seed: int | str) -> list[int]:
    """Intermediate steps this run also keeps for the BASIS value study on RL checkpoints
    (`basis.study_checkpoints: {method, seed, fractions}`, BASIS Section 5.1 / Appendix A), beyond
    the final step and `snapshot_steps`; [] for every other run. Kept, not evaluated (only
    `snapshot_steps` is), and saving a checkpoint reads the model only, so the run's metrics do not
    change. `method` is the run trained (the owner of basis.study_checkpoints.method, `run_owners`)."""
    sc = (cfg.get("basis") or {}).get("study_checkpoints")
    rl = cfg.get("rl")
    if not sc or not rl or int(section_setting(sc, "basis", "study_checkpoints", "seed")) != int(seed):
        return []
    if sc["method"] != method.name:
        # the studied name may repeat this run's spec; run_owners (30 method files) only then:
        # Snakemake asks every rl_train job's key
        same = {**load_method(sc["method"]).to_dict(), "name": None} == {**method.to_dict(), "name": None}
        methods = rl.get("methods", [])
        if not same or sc["method"] not in methods or run_owners(methods, rl.get("rollouts_per_step"))[sc["method"]] != method.name:
            return []
    n = total_steps(rl, method)
    # those rl.eval_fractions keeps anyway add nothing (and leave the run's keys as they were)
    return sorted({fraction_step(f, n) for f in sc.get("fractions", [])} - {n} - set(snapshot_steps(rl, method)))


def run_owners(methods: list[str], rollouts_per_step: int | None = None) -> dict[str, str]:
    """Each listed method -> the first listed method with the same spec (every field but the
    name). Two such methods train the same run to the byte (no seed depends on a name), so the
    DAG trains the owner once and both names report it; e.g. BASIS's grid cell "GRPO, G=1,
    vanilla" is `vanilla_g1`. Given `rl.rollouts_per_step`, a `prompts_per_step` equal to
    rollouts_per_step / group_size is the default's and counts as unset (`grpo_g4_mp` at 256
    rollouts a step is `grpo_g4`: the trainer draws the same prompts)."""
    # memoised on the method files' mtimes: a Snakemake parse asks it for every run of every figure
    stamp = (str(METHODS_DIR),) + tuple((q.name, q.stat().st_mtime_ns) for q in sorted(Path(METHODS_DIR).glob("*.yaml")))
    return dict(_run_owners(tuple(methods), stamp, rollouts_per_step))


@functools.lru_cache(maxsize=64)
def _run_owners(methods: tuple[str, ...], stamp: tuple,
                rollouts_per_step: int | None = None) -> tuple[tuple[str, str], ...]:
    first: dict[str, str] = {}
    out = []
    for name in methods:
        d = load_method(name).to_dict()
        d.pop("name")
        pps = d.get("prompts_per_step")
        if pps is None or (rollouts_per_step and rollouts_per_step % d["group_size"] == 0
                           and pps == rollouts_per_step // d["group_size"]):
            d.pop("prompts_per_step", None)
        key = json.dumps(d, sort_keys=True)
        out.append((name, first.setdefault(key, name)))
    return tuple(out)

