"""The long-horizon recipe's tiers (the runner end to end on it: tests/test_experiments.py)."""
from composer_jax.config_loading import load_config
from composer_jax.config_schema import validate


def test_tier_caps_follow_the_longest_chain_trained_or_evaluated():
    from configs.rl_horizon import HORIZONS, tier

    c = load_config("configs/rl_horizon.py")
    validate(c)
    longest_curriculum = max(t["hops"] for t in c.rl.curriculum)
    assert c.rl.suite_options.carry == "registers" and c.rollout.max_segments == max(c.rl.suite_options.hops, longest_curriculum) + 4
    hops, filler = HORIZONS[100]
    long = tier(load_config("configs/rl_horizon.py"), hops, filler)
    assert (long.rl.suite_options.hops, long.rl.suite_options.filler_lines) == (hops, filler)
    assert long.rl.env_max_turns == long.rollout.max_turns == long.rollout.max_segments == hops + 4
    validate(long)
    held_out = c.experiment.evaluations["100x"]  # the recipe's 100x set: that tier under its caps
    assert (held_out.suite_options.hops, held_out.rl.env_max_turns, held_out.rollout.max_segments) == (
        hops, hops + 4, hops + 4)
    assert [h for h, _ in HORIZONS.values()] == sorted(h for h, _ in HORIZONS.values())
