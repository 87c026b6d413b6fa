"""Config files and `--set KEY=VALUE` overrides."""
import pytest

from composer_jax.config_loading import apply_override, load_config
from composer_jax.errors import ConfigError


def test_overrides_keep_the_type_of_the_key_they_replace():
    c = load_config("configs/tiny.py:test")
    apply_override(c, "rl.steps=7.0")  # an int key stays an int
    apply_override(c, "rollout.temperature=1")  # a float key stays a float
    apply_override(c, "rollout.prefill_buckets=(128, 512)")
    apply_override(c, "rl.init_from=runs/sft/checkpoints")  # not a literal: a bare string
    assert c.rl.steps == 7 and isinstance(c.rl.steps, int)
    assert c.rollout.temperature == 1.0 and isinstance(c.rollout.temperature, float)
    assert tuple(c.rollout.prefill_buckets) == (128, 512)
    assert c.rl.init_from == "runs/sft/checkpoints"


@pytest.mark.parametrize("item, message", [
    ("rl.steps", "expected KEY=VALUE"),
    ("nosuch.steps=1", "no config section 'nosuch'"),
    ("rl.stepz=1", "no config key 'rl.stepz'"),
    ("rl.steps=many", "rl.steps holds a int"),
])
def test_bad_overrides_name_what_is_wrong_and_change_nothing(item, message):
    c = load_config("configs/tiny.py:test")
    before = c.to_json()
    with pytest.raises(ConfigError, match=message):
        apply_override(c, item)
    assert c.to_json() == before
