"""The fleet config block and the errors a user sees before any worker starts."""
import builtins
import warnings

import pytest

from composer_jax.errors import ConfigError
from composer_jax.fleet import FleetConfig, FleetUnavailableError, cluster
from composer_jax.rl.envs import RunEnvs
from configs.tiny import get_config


def test_tiny_config_has_a_valid_fleet_block_with_local_default():
    from configs.tiny import get_config

    cfg = FleetConfig.from_config(get_config().fleet)
    assert cfg.backend == "local" and cfg.rl_mode == "sync"


@pytest.mark.parametrize("field,value,match", [
    ("backend", "k8s", "fleet.backend"), ("workers", 0, "fleet.workers"), ("max_lag", -1, "fleet.max_lag"),
    ("cpus_per_worker", 0, "fleet.cpus_per_worker"), ("rl_mode", "lockstep", "fleet.rl_mode"),
    ("colour", 1, "fleet.colour: unknown")])
def test_bad_fleet_values_name_the_field(field, value, match):
    with pytest.raises(ConfigError, match=match):
        FleetConfig.from_config({field: value})


def test_missing_ray_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    c = get_config("test")
    c.fleet.backend = "ray"
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(FleetUnavailableError, match=r"pip install -e '\.\[ray\]'"):
        RunEnvs(c)


def test_unreachable_cluster_names_the_address(monkeypatch):
    ray = pytest.importorskip("ray", reason="needs the ray extra: pip install -e '.[ray]'")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # whatever ran before in this process
    with pytest.raises(FleetUnavailableError, match=r"127\.0\.0\.1:9"):
        cluster.connect("127.0.0.1:9")  # discard port: nothing listens; fails in about a second
    with pytest.raises(FleetUnavailableError, match="expected ''"):
        cluster.connect("no-port-here")


def test_pool_size_is_cut_to_the_cpus_with_a_warning():
    with pytest.warns(UserWarning, match="starting 4 workers"):
        assert cluster.fit_pool_size(10, 0.5, 2.0) == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cluster.fit_pool_size(3, 0.5, 2.0) == 3
    with pytest.raises(FleetUnavailableError, match="not enough for one env worker"):
        cluster.fit_pool_size(2, 4.0, 2.0)


def test_local_backend_is_plain_gymnasium_with_the_split_and_prompt_of_the_run():
    c = get_config("test")
    c.rl.suite_options = {"hops": 2, "filler_lines": 3, "validation_size": 4}
    c.rl.system_prompt = "Short manual."
    with RunEnvs(c) as envs:
        env = envs.factory(c.rl, "validation")()
        prompt, info = env.reset(seed=0)
        assert "docs/start.md" in prompt and "/validation-" in info["task_id"]  # the split travels
        assert info["system_prompt"] == "Short manual."
        env.close()
        assert envs.pools() == []  # local envs: no worker pool
