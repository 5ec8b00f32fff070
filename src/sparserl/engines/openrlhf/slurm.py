"""Ray on a SLURM allocation, for `openrlhf-launch`.

Inside an allocation (``SLURM_JOB_NODELIST`` set; Snakemake's SLURM executor runs the rule's
command there), the nodes are ``scontrol show hostnames $SLURM_JOB_NODELIST``; the first is the
head. Ray is started as in Ray's SLURM guide, one ``srun`` step per node:

    srun --nodes=1 --ntasks=1 --overlap [--cpus-per-task=C] [--gpus=G] -w <head>
         ray start --head --node-ip-address=<ip> --port=<port> [--num-gpus=G] [--num-cpus=C] --block
    srun ... -w <node_i> ray start --address=<ip>:<port> ... --block                  (background)

``--overlap`` lets the steps share the resources of the step that runs the driver (the job's
command itself may be an srun step). Without ``--cpus-per-task`` / ``--gpus`` a step gets one CPU
and no GPU on clusters that confine steps with cgroups (TaskPlugin=task/cgroup), and the raylet,
with every worker it forks, is pinned to that CPU; so the node's CPUs and GPUs of this job are
given to srun and, as the same numbers, to ``ray start``. The head address is the head's IP from
``srun -w <head> hostname --ip-address`` (first address), or its hostname if that fails. The
driver (this process, on the first node) then joins with ``ray.init(address=<ip>:<port>)``.
Outside an allocation `plan_from_env` returns None and the launcher starts a local Ray.

Everything that builds commands is a pure function of the node list and settings, so it is
tested with a fake environment; `start_ray` / `stop` run them.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence


@dataclass
class RayCluster:
    nodes: list[str]
    head_ip: str
    port: int = 6379
    gpus_per_node: int | None = None
    cpus_per_node: int | None = None
    head_command: list[str] = field(default_factory=list)
    worker_commands: list[list[str]] = field(default_factory=list)

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"


def nodelist(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    return env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")


def hostnames_command(nodes_expr: str) -> list[str]:
    return ["scontrol", "show", "hostnames", nodes_expr]


def expand_nodes(nodes_expr: str, run: Callable = subprocess.run) -> list[str]:
    """`scontrol show hostnames` of a SLURM node expression (e.g. 'gpu[01-02]')."""
    out = run(hostnames_command(nodes_expr), capture_output=True, text=True, check=True).stdout
    nodes = out.split()
    if not nodes:
        raise RuntimeError(f"scontrol show hostnames {nodes_expr!r} listed no node")
    return nodes


def _srun(node: str, gpus: int | None = None, cpus: int | None = None) -> list[str]:
    out = ["srun", "--nodes=1", "--ntasks=1", "--overlap"]
    if cpus is not None:
        out.append(f"--cpus-per-task={int(cpus)}")
    if gpus:
        out.append(f"--gpus={int(gpus)}")
    return out + ["-w", node]


def head_ip_command(head: str) -> list[str]:
    return _srun(head) + ["hostname", "--ip-address"]


def _resources(gpus: int | None, cpus: int | None) -> list[str]:
    out = []
    if gpus is not None:
        out.append(f"--num-gpus={int(gpus)}")
    if cpus is not None:
        out.append(f"--num-cpus={int(cpus)}")
    return out


def ray_start_commands(nodes: Sequence[str], head_ip: str, *, port: int = 6379, gpus_per_node: int | None = None,
                       cpus_per_node: int | None = None) -> tuple[list[str], list[list[str]]]:
    """(head command, worker commands) for a node list; the head is nodes[0]."""
    if not nodes:
        raise ValueError("no nodes")
    res = _resources(gpus_per_node, cpus_per_node)
    head = _srun(nodes[0], gpus_per_node, cpus_per_node) + [
        "ray", "start", "--head", f"--node-ip-address={head_ip}", f"--port={int(port)}", *res, "--block"]
    workers = [_srun(n, gpus_per_node, cpus_per_node) + ["ray", "start", f"--address={head_ip}:{int(port)}",
                                                         *res, "--block"]
               for n in nodes[1:]]
    return head, workers


def _int_env(env: Mapping[str, str], *names: str) -> int | None:
    for n in names:
        v = env.get(n)
        if v:
            try:
                return int(str(v).split("(")[0].split(",")[0].split(":")[-1])
            except ValueError:
                continue
    return None


def plan(nodes: Sequence[str], *, head_ip: str | None = None, port: int = 6379, gpus_per_node: int | None = None,
         cpus_per_node: int | None = None) -> RayCluster:
    head, workers = ray_start_commands(nodes, head_ip or nodes[0], port=port, gpus_per_node=gpus_per_node,
                                       cpus_per_node=cpus_per_node)
    return RayCluster(nodes=list(nodes), head_ip=head_ip or nodes[0], port=port, gpus_per_node=gpus_per_node,
                      cpus_per_node=cpus_per_node, head_command=head, worker_commands=workers)


def plan_from_env(env: Mapping[str, str] | None = None, run: Callable = subprocess.run, *, port: int = 6379,
                  gpus_per_node: int | None = None, cpus_per_node: int | None = None) -> RayCluster | None:
    """The Ray cluster for the current SLURM allocation, or None outside one.

    GPUs/CPUs per node: the arguments, else the job's: SLURM_GPUS_ON_NODE (SLURM_GPUS_PER_NODE,
    SLURM_GPUS_PER_TASK) and SLURM_CPUS_PER_TASK (the rule's cpus_per_task; SLURM_CPUS_ON_NODE).
    """
    env = os.environ if env is None else env
    expr = nodelist(env)
    if not expr:
        return None
    nodes = expand_nodes(expr, run)
    if gpus_per_node is None:
        gpus_per_node = _int_env(env, "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_PER_TASK")
    if cpus_per_node is None:
        cpus_per_node = _int_env(env, "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE")
    head_ip = None
    try:
        out = run(head_ip_command(nodes[0]), capture_output=True, text=True, check=True, timeout=120).stdout.split()
        head_ip = out[0] if out else None
    except (subprocess.SubprocessError, OSError):
        head_ip = None
    return plan(nodes, head_ip=head_ip, port=port, gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node)


def shell_script(cluster: RayCluster, driver: Sequence[str]) -> str:
    """The same steps as a bash script (for a manual ``sbatch``): Ray up, then the driver."""
    lines = ["set -euo pipefail", shlex.join(cluster.head_command) + " &", "sleep 10"]
    lines += [shlex.join(c) + " &" for c in cluster.worker_commands]
    lines += ["sleep 10", f"RAY_ADDRESS={cluster.address} " + shlex.join(list(driver))]
    return "\n".join(lines) + "\n"


def start_ray(cluster: RayCluster, *, popen: Callable = subprocess.Popen, wait: Callable | None = None,
              log=print) -> list:
    """Start the head, wait until it answers, start the workers, wait until all nodes joined."""
    wait = wait or wait_for_nodes
    procs = [popen(cluster.head_command)]
    log("[slurm] " + shlex.join(cluster.head_command))
    wait(cluster.address, 1)
    for cmd in cluster.worker_commands:
        log("[slurm] " + shlex.join(cmd))
        procs.append(popen(cmd))
    wait(cluster.address, len(cluster.nodes))
    return procs


def wait_for_nodes(address: str, n: int, timeout_s: float = 600.0, poll_s: float = 5.0,
                   run: Callable = subprocess.run) -> None:
    """Poll ``ray status --address`` until `n` nodes are alive (counts 'node_' lines)."""
    t0 = time.time()
    while True:
        r = run(["ray", "status", f"--address={address}"], capture_output=True, text=True)
        alive = r.stdout.count(" node_") if r.returncode == 0 else 0
        if alive >= n:
            return
        if time.time() - t0 > timeout_s:
            raise TimeoutError(f"Ray at {address}: {alive}/{n} nodes after {timeout_s:.0f}s:\n{r.stdout}{r.stderr}")
        time.sleep(poll_s)


def stop(procs: Sequence) -> None:
    """End the srun steps we started (their `ray start --block` stops the node's Ray)."""
    for p in reversed(list(procs)):
        try:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=60)
        except Exception:
            try:
                p.kill()
            except Exception:
                pass


__all__ = ["RayCluster", "expand_nodes", "head_ip_command", "hostnames_command", "nodelist", "plan",
           "plan_from_env", "ray_start_commands", "shell_script", "start_ray", "stop", "wait_for_nodes"]
