"""Group-relative advantages and dynamic sampling's group selection."""
import numpy as np
import pytest

from composer_jax.rl.advantages import group_advantages, select_groups
from composer_jax.rl.trajectory import Episode


def test_estimators_by_hand():
    r = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    mean, std = 0.6, np.sqrt(0.24)
    np.testing.assert_allclose(group_advantages(r, "grpo"), (r - mean) / (std + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(group_advantages(r, "dr_grpo"), r - mean, rtol=1e-6)
    # RLOO: r_i - mean of the other four
    np.testing.assert_allclose(group_advantages(r, "rloo"), [1 - 0.5, 0 - 0.75, 0 - 0.75, 0.5, 0.5], rtol=1e-6)
    with pytest.raises(ValueError):
        group_advantages(r, "ppo")


def ep(reason="submit"):
    return Episode(0, {}, end_reason=reason)


def test_select_drops_zero_variance_errors_and_masks_unfinished():
    groups = [
        [ep(), ep(), ep()],  # all equal -> dropped
        [ep(), ep("env_error"), ep("max_turns")],  # error excluded; unfinished kept, masked
        [ep("env_error"), ep("env_error"), ep()],  # one usable member -> dropped
        [ep(), ep()],
    ]
    rewards = [[1, 1, 1], [1, 0, 0], [0, 1, 1], [0, float("nan")]]
    sel = select_groups(groups, rewards, "grpo", mask_unfinished=True)
    assert len(sel.groups) == 1
    g = sel.groups[0]
    assert len(g.episodes) == 2 and list(g.trainable) == [True, False]
    assert sel.counts == dict(zero_variance_groups=1, small_groups=2, env_error_episodes=3,
                              unfinished_masked=1, nonfinite_reward_episodes=1)
    sel = select_groups(groups[:2], rewards[:2], "dr_grpo")
    assert list(sel.groups[0].trainable) == [True, True]
    np.testing.assert_allclose(sel.groups[0].advantages, [0.5, -0.5])


def test_negative_weight_scales_only_below_baseline_advantages():
    groups, rewards = [[ep(), ep(), ep(), ep()]], [[1.0, 0.5, 0.0, 0.5]]
    sel = select_groups(groups, rewards, "dr_grpo", negative_weight=0.25)
    np.testing.assert_allclose(sel.groups[0].advantages, [0.5, 0.0, -0.125, 0.0])
    sel = select_groups(groups, rewards, "dr_grpo", negative_weight=0.0)
    np.testing.assert_allclose(sel.groups[0].advantages, [0.5, 0.0, 0.0, 0.0])
