"""Config files and `--config.KEY=VALUE` overrides."""
import pytest

from composer_jax.config_loading import apply_override, load_config, split_overrides
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
    ("rl.steps", "--config.rl.steps: expected --config.KEY=VALUE"),
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


def test_every_entry_point_takes_config_dot_overrides():
    rest, overrides = split_overrides(["--workdir", "w", "--config.rl.steps=3", "--config.seed", "2", "--mode", "rl"])
    assert rest == ["--workdir", "w", "--mode", "rl"] and overrides == ["rl.steps=3", "seed=2"]
    c = load_config("configs/tiny.py:test", overrides)
    assert c.rl.steps == 3 and c.seed == 2
    with pytest.raises(ConfigError, match="--config.seed: expected --config.seed=VALUE"):
        split_overrides(["--config.seed"])


@pytest.mark.parametrize("block, key, value, message", [
    ("rl", "grup_size", 4, r"rl.grup_size: unknown field"),
    ("rl", "group_size", "four", r"rl.group_size='four': expected int"),
    ("rl.loss", "klcoef", 0.1, r"rl.loss.klcoef: unknown field"),
    ("rl.optim", "lr", "1e-4", r"rl.optim.lr='1e-4': expected float"),
    ("sft.optim", "embed_lr_scal", 2.0, r"sft.optim.embed_lr_scal: unknown field"),
    ("sft", "demos", True, r"sft.demos=True: expected int"),
    ("fleet", "colour", 1, r"fleet.colour: unknown field"),
    ("rollout", "windw", 1, r"rollout.windw: unknown field"),
    ("train", "stpes", 10, r"train.stpes: unknown field"),
    ("train", "lr", "3e-3", r"train.lr='3e-3': expected float"),
    ("checkpoint", "evry", 10, r"checkpoint.evry: unknown field"),
    ("data", "seq_len", 1, r"data.seq_len must be >= 2 .*, got 1"),
    ("data", "tokenizer_agent_task", 8, r"data.tokenizer_agent_task: unknown field"),
    ("mesh", "pipeline", 2, r"mesh.pipeline: unknown mesh axis"),
    ("launch", "slices", "v5e-8", r"launch.slices: unknown field"),
    ("pipeline", "eval_tasks", 0, r"pipeline.eval_tasks=0: must be >= 1"),
    ("", "experimnt", {}, r"experimnt: unknown config block"),
    ("", "seed", "zero", r"seed='zero': expected int"),
])
def test_typed_blocks_reject_unknown_keys_and_wrong_types_naming_the_field(block, key, value, message):
    from composer_jax.config_schema import validate

    c = load_config("configs/tiny.py:test")
    validate(c)  # the shipped config is valid
    node = c
    for name in filter(None, block.split(".")):
        node = node[name]
    with node.ignore_type():
        node[key] = value
    with pytest.raises(ConfigError, match=message):
        validate(c)
