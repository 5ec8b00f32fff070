"""AdamW for the CPU trainer, without `torch.optim`.

Why: `torch.optim.Optimizer` imports `torch._dynamo` on first use (1.45 s here), and the tiny DAG
starts 48 short RL processes of about 12 s each. This is the arithmetic of
`torch.optim.AdamW`'s single-tensor path, the one it takes for CPU tensors (decoupled weight
decay, bias-corrected moments, `eps` added after the square root), op for op, so it gives the
same bits (tests/engines/local/test_adamw.py). `state_dict` uses torch's layout, so a run checkpointed by
either optimiser resumes with the other.
"""
from __future__ import annotations

import torch


class AdamW:
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        self.params = list(params)
        if not self.params:
            raise ValueError("AdamW got an empty parameter list")
        self.param_groups = [{"lr": lr, "betas": tuple(betas), "eps": eps,
                              "weight_decay": weight_decay, "amsgrad": False, "maximize": False}]
        self.state: dict[int, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        g = self.param_groups[0]
        lr, (beta1, beta2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("AdamW does not support sparse gradients")
            st = self.state.get(i)
            if st is None:
                # torch keeps the step count in a float32 scalar tensor; so do we
                st = self.state[i] = {"step": torch.tensor(0.0, dtype=torch.float32),
                                      "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                      "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            st["step"] += 1
            if wd != 0:
                p.mul_(1 - lr * wd)
            st["exp_avg"].lerp_(p.grad, 1 - beta1)
            st["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            step = st["step"].item()
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            denom = (st["exp_avg_sq"].sqrt() / bias_correction2 ** 0.5).add_(eps)
            p.addcdiv_(st["exp_avg"], denom, value=-(lr / bias_correction1))

    def state_dict(self) -> dict:
        """torch.optim's layout: per-parameter state keyed by position, one param group."""
        group = {**self.param_groups[0], "params": list(range(len(self.params)))}
        return {"state": {i: {k: v.clone() for k, v in st.items()} for i, st in self.state.items()},
                "param_groups": [group]}

    def load_state_dict(self, sd: dict) -> None:
        groups = sd.get("param_groups", [])
        if len(groups) != 1 or len(groups[0].get("params", [])) != len(self.params):
            raise ValueError(f"optimizer state holds {[len(g.get('params', [])) for g in groups]} "
                             f"parameters in {len(groups)} group(s); this model has one group of "
                             f"{len(self.params)}: the checkpoint is from another model")
        for key in ("lr", "betas", "eps", "weight_decay"):
            if key in groups[0]:
                self.param_groups[0][key] = tuple(groups[0][key]) if key == "betas" else groups[0][key]
        self.state = {}
        for pos, i in enumerate(groups[0]["params"]):
            if i in sd["state"]:
                p, st = self.params[pos], sd["state"][i]
                self.state[pos] = {"step": st["step"].detach().clone().to(torch.float32),
                                   "exp_avg": st["exp_avg"].detach().clone().to(p.dtype),
                                   "exp_avg_sq": st["exp_avg_sq"].detach().clone().to(p.dtype)}
