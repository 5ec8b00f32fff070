"""A tiny RL world in a tmp folder, shared by the trainer tests: the smoke config's pool, a
tiny policy `s` and a reference cache of made-up pass rates."""
import numpy as np
import pandas as pd

from sparserl.core.artifacts import write_table
from sparserl.core.config import load_config
from sparserl.core.paths import Paths
from sparserl.tasks import procedural


def rl_world(tmp_path, tiny_lm, repo, *, steps=8, max_new_tokens=8, eval_fractions=(0.5,)) -> dict:
    from sparserl.models.policies import save_hf
    cfg = load_config(repo / "configs/smoke.yaml")
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["rl"] = {"policy": "s", "methods": ["grpo_g4"], "seeds": [0], "steps": steps,
                 "rollouts_per_step": 16, "lr": 1e-4, "checkpoint_every": 2,
                 "eval_fractions": list(eval_fractions), "mini_batches": 2}
    cfg["rollout"]["max_new_tokens"] = max_new_tokens
    P = Paths(cfg)
    pool = procedural.make_train_pool(cfg)
    write_table(pool, P.train_pool())
    model, tok = tiny_lm
    save_hf(model, tok, P.policy("s"), {"test": True})
    phat = np.random.default_rng(0).uniform(0, 1, len(pool)).round(3)
    write_table(pd.DataFrame({"prompt_id": pool["id"], "n": 64, "successes": (phat * 64).astype(int),
                              "phat": phat, "rewards": [[0] * 64] * len(pool)}), P.reference_cache("s"))
    return cfg
