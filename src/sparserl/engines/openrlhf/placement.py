"""Where Ray places a paper run's actors, and the V0 prior actor among them (`colocated_plan`).

OpenRLHF 0.11.2 with ``--train.colocate_all`` (`openrlhf.cli.train_ppo_ray.train`) makes one
placement group of ``nodes x gpus_per_node`` bundles ``{"GPU": 1, "CPU": 1}`` (strategy PACK) and
puts in bundle i a share of 0.2 GPU and 0.2 CPU for each of: vLLM engine i (hybrid engine,
`create_vllm_engines`), policy rank i, reference rank i (KL > 0) and critic rank i (Le Critique);
tensor-parallel engines spread their 0.2 shares over consecutive bundles. That group holds every
GPU of the job, so an actor asking Ray for a GPU outside it waits forever. The V0 prior actor
therefore takes ``rl.openrlhf.v0_gpus`` of one GPU (and as much of the bundle's CPU) in the group's
last bundle, off rank 0's bundle, which also gathers the weights for the vLLM sync.

`colocated_plan` is pure (no Ray): the config check at load (`core.config`), the launcher's log
line and the V0 actor's options (`v0_server.v0_server`) all come from it. The colocated group gets
the name `GROUP_NAME` (`named_placement_group`, patched into OpenRLHF's `train_ppo_ray` by
`patches`) so the process that starts the V0 actor, a Ray worker, can find it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# OpenRLHF's fixed share per colocated actor (train_ppo_ray: num_gpus_per_actor=0.2 if pg;
# vllm_engine.create_vllm_engines: num_gpus 0.2 with a shared group); num_cpus equals it
OPENRLHF_SHARE = 0.2
GROUP_NAME = "sparserl_colocated"
V0_ROLE = "v0 prior"


@dataclass(frozen=True)
class Share:
    """One actor's request: `bundle` of the colocated group (None: outside any group)."""
    role: str
    bundle: int | None
    gpus: float
    cpus: float


@dataclass
class Plan:
    nodes: int
    gpus_per_node: int
    bundles: list[dict] = field(default_factory=list)  # the colocated group's bundles ([] without one)
    shares: list[Share] = field(default_factory=list)

    def node_of(self, bundle: int) -> int:
        """The node PACK puts a bundle on when every node's GPUs are free: bundles fill nodes in order."""
        return bundle // self.gpus_per_node

    def used(self, bundle: int, what: str = "gpus") -> float:
        return round(sum(getattr(s, what) for s in self.shares if s.bundle == bundle), 6)

    @property
    def v0(self) -> Share | None:
        return next((s for s in self.shares if s.role == V0_ROLE), None)

    def outside(self) -> list[Share]:
        """Requests outside the colocated group that ask for a GPU (the ones that would hang)."""
        return [s for s in self.shares if s.bundle is None and s.gpus > 0]

    def lines(self) -> list[str]:
        """One line per bundle: node, its actors and the GPU / CPU sums."""
        out = [f"placement group {GROUP_NAME}: {len(self.bundles)} bundles of {self.bundles[0]}, PACK over "
               f"{self.nodes} node(s)" if self.bundles else "no colocated placement group (train.colocate_all off)"]
        for b in range(len(self.bundles)):
            who = ", ".join(f"{s.role} {s.gpus:g}" for s in self.shares if s.bundle == b)
            out.append(f"  bundle {b} (node {self.node_of(b)}): {who}; GPU {self.used(b):g} CPU {self.used(b, 'cpus'):g}")
        out += [f"  outside the group: {s.role} {s.gpus:g} GPU {s.cpus:g} CPU" for s in self.shares if s.bundle is None]
        return out


def colocated_plan(*, nodes: int, gpus_per_node: int, vllm_engines: int, tensor_parallel_size: int = 1,
                   colocate_all: bool = True, colocate_actor_ref: bool = False, async_enable: bool = False,
                   ref: bool = False, critic: bool = False, colocate_critic_reward: bool = False,
                   v0_gpus: float | None = None) -> Plan:
    """The shares `train_ppo_ray.train` asks for in its colocated group, plus V0's (None: no V0).

    Raises `ConfigError` (one line) when V0's share does not fit its bundle or when it would ask
    for a GPU outside the group (no colocated group: ``train.colocate_all`` off)."""
    from sparserl.core.config import ConfigError
    n = int(nodes) * int(gpus_per_node)
    plan = Plan(int(nodes), int(gpus_per_node))
    grouped = bool(colocate_all or colocate_actor_ref)
    if grouped:
        plan.bundles = [{"GPU": 1, "CPU": 1} for _ in range(n)]
        if colocate_all and not async_enable:  # else vLLM makes its own group of whole GPUs
            tp = int(tensor_parallel_size)
            for e in range(int(vllm_engines)):
                plan.shares += [Share(f"vllm engine {e}", b, OPENRLHF_SHARE, OPENRLHF_SHARE)
                                for b in range(e * tp, (e + 1) * tp)]
        plan.shares += [Share(f"policy rank {r}", r, OPENRLHF_SHARE, OPENRLHF_SHARE) for r in range(n)]
        if ref:
            plan.shares += [Share(f"reference rank {r}", r, OPENRLHF_SHARE, OPENRLHF_SHARE) for r in range(n)]
        if critic and colocate_all and not colocate_critic_reward:  # train() keeps the group for it
            plan.shares += [Share(f"critic rank {r}", r, OPENRLHF_SHARE, OPENRLHF_SHARE) for r in range(n)]
    # OpenRLHF's single controller (`PPOTrainer.remote()`, no options): Ray's actor default, no GPU
    plan.shares.append(Share("ppo trainer (controller)", None, 0.0, 1.0))
    if v0_gpus is not None:
        g = float(v0_gpus)
        if not grouped:
            if g > 0:
                raise ConfigError(f"rl.openrlhf.v0_gpus = {g:g} but train.colocate_all is off: OpenRLHF's groups "
                                  "hold every GPU in whole bundles and the V0 actor would wait forever; set "
                                  "rl.openrlhf.v0_gpus to 0 or train.colocate_all to true")
            plan.shares.append(Share(V0_ROLE, None, 0.0, OPENRLHF_SHARE / 2))
        else:
            last = n - 1
            free = round(1.0 - max(plan.used(last), plan.used(last, "cpus")), 6)
            if g > free:
                raise ConfigError(f"rl.openrlhf.v0_gpus = {g:g} does not fit bundle {last} of OpenRLHF's colocated "
                                  f"group, whose actors already take {1 - free:g} of its GPU; set v0_gpus to at most {free:g}")
            # Ray counts a CPU share, not threads (v0_threads sets those); a GPU-less V0 still needs one
            plan.shares.append(Share(V0_ROLE, last, g, g if g > 0 else min(free, OPENRLHF_SHARE / 2)))
    return plan


def plan_from_args(args) -> Plan:
    """The plan of OpenRLHF's parsed args (`parser.parse_args`); V0's share when the run has a V0."""
    sp = getattr(args, "sparserl", None)
    return colocated_plan(
        nodes=args.actor.num_nodes, gpus_per_node=args.actor.num_gpus_per_node,
        vllm_engines=args.vllm.num_engines or 0, tensor_parallel_size=args.vllm.tensor_parallel_size,
        colocate_all=args.train.colocate_all, colocate_actor_ref=args.train.colocate_actor_ref,
        async_enable=args.train.async_enable, ref=args.algo.kl.init_coef > 0,
        critic=bool(args.critic.model_name_or_path),
        colocate_critic_reward=bool(getattr(args.train, "colocate_critic_reward", False)),
        v0_gpus=float(sp.v0_gpus) if getattr(sp, "v0_model", None) else None)


def named_placement_group(bundles, strategy="PACK", name="", **kw):
    """`ray.util.placement_group` for OpenRLHF's train_ppo_ray: its first group (the colocated one
    when colocate_all / colocate_actor_ref; a critic's comes later) gets `GROUP_NAME`."""
    import ray
    from ray.util.placement_group import placement_group
    if not name:
        try:
            ray.util.get_placement_group(GROUP_NAME)
        except ValueError:  # none yet in this job's namespace
            name = GROUP_NAME
    return placement_group(bundles, strategy=strategy, name=name, **kw)


def colocated_group():
    """The run's colocated placement group (named by `named_placement_group`)."""
    import ray
    try:
        return ray.util.get_placement_group(GROUP_NAME)
    except ValueError as e:
        raise RuntimeError(f"no placement group named {GROUP_NAME} in this Ray job: the V0 actor was started "
                           "outside openrlhf-launch, or patches.PATCHES lost its train_ppo_ray entry; start the "
                           "run with openrlhf-launch") from e


def check_v0_actor(cfg: dict, origin) -> None:
    """The V0 prior actor must fit inside OpenRLHF's colocated placement group, which holds every
    GPU of the job (engines.openrlhf.placement); checked per method of rl.methods that queries V0."""
    rl = cfg.get("rl") or {}
    if not rl.get("methods"):
        return
    from sparserl.core.config import ConfigError, openrlhf_shape, v0_actor_settings
    from sparserl.engines.openrlhf.flags import cluster_defaults
    from sparserl.methods.spec import load_method
    over = {**cluster_defaults(), **openrlhf_shape(rl.get("openrlhf"))}
    nodes, gpn, tp = int(over["nodes"]), int(over["gpus_per_node"]), int(over["vllm.tensor_parallel_size"])
    shape = dict(nodes=nodes, gpus_per_node=gpn, tensor_parallel_size=tp,
                 vllm_engines=int(over.get("vllm.num_engines") or max(1, nodes * gpn // tp)),
                 colocate_all=bool(over.get("train.colocate_all")),
                 colocate_actor_ref=bool(over.get("train.colocate_actor_ref")),
                 async_enable=bool(over.get("train.async_enable")), v0_gpus=float(v0_actor_settings(over)["v0_gpus"]))
    try:  # a share that fits beside a reference and a critic fits every method: no method file read
        colocated_plan(**shape, ref=True, critic=True)
        return
    except ConfigError:
        pass
    for name in rl["methods"]:
        try:
            m = load_method(name)
        except ConfigError:  # an unknown or broken method file is reported where methods are read
            continue
        if not m.needs_v0_model:
            continue
        try:
            colocated_plan(**shape, ref=m.kl_coef > 0, critic=m.critic is not None)
        except ConfigError as e:
            raise ConfigError(f"{origin(['rl', 'openrlhf'])}: {e} (method {name})") from None


def _register() -> None:
    from sparserl.core.config import SEMANTIC_CHECKS
    if check_v0_actor not in SEMANTIC_CHECKS:
        SEMANTIC_CHECKS.append(check_v0_actor)


_register()
