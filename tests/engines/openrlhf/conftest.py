"""The OpenRLHF plugin tests' shared fixtures: OpenRLHF's modules imported on CPU, and Ray's
object store bypassed for stand-in actors."""
import pytest

from helpers import openrlhf_stubs

# every module a test here reads as `orl.<name>`: OpenRLHF's first, then ours, which patch them
ORL_MODULES = {
    "em": "openrlhf.trainer.ppo_utils.experience_maker",
    "exp": "openrlhf.trainer.ppo_utils.experience",
    "sg": "openrlhf.trainer.ppo_utils.samples_generator",
    "loss": "openrlhf.models.loss",
    "model": "openrlhf.models.model",
    "agent": "openrlhf.utils.agent",
    "vllm_engine": "openrlhf.trainer.ray.vllm_engine",
    "ppo_trainer": "openrlhf.trainer.ppo_trainer",
    "ppo_trainer_async": "openrlhf.trainer.ppo_trainer_async",
    "ppo_actor": "openrlhf.trainer.ray.ppo_actor",
    "ppo_critic": "openrlhf.trainer.ray.ppo_critic",
    "train_ppo_ray": "openrlhf.cli.train_ppo_ray",
    "critic": "sparserl.engines.openrlhf.critic",
    "envs": "sparserl.engines.openrlhf.envs",
    "critique": "sparserl.engines.openrlhf.critique",
    "plugin_exp": "sparserl.engines.openrlhf.experience",
    "plugin_samples": "sparserl.engines.openrlhf.samples",
    "plugin_losses": "sparserl.engines.openrlhf.losses",
    "launcher": "sparserl.engines.openrlhf.launcher",
    "patches": "sparserl.engines.openrlhf.patches",
}


@pytest.fixture(scope="module")
def orl():
    """OpenRLHF's modules with the vllm/flash_attn placeholders, for one test module; the
    placeholders and our post-import patcher are removed when it ends. A module that needs the
    placeholders in every test asks for it with `pytestmark = pytest.mark.usefixtures("orl")`."""
    yield from openrlhf_stubs.imported(ORL_MODULES)


@pytest.fixture()
def no_ray(monkeypatch):
    """ray.get and ray.put as the identity: the stand-in actors return values, not references."""
    import ray
    monkeypatch.setattr(ray, "get", lambda x: x)
    monkeypatch.setattr(ray, "put", lambda x: x)
