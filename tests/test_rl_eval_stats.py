"""Paired comparison of two policies' held-out outcomes (exact McNemar), by hand."""
import pytest

from composer_jax.rl.learner import mcnemar


def test_counts_and_exact_p_value():
    # 3 episodes only A passed, 1 only B, 2 both, 1 neither: p = 2 * P(X <= 1), X ~ Bin(4, 1/2)
    a = [1, 1, 1, 0, 1, 1, 0]
    b = [0, 0, 0, 1, 1, 1, 0]
    r = mcnemar(a, b)
    assert (r["only_a"], r["only_b"], r["both"], r["neither"]) == (3, 1, 2, 1)
    assert r["p_value"] == pytest.approx(2 * (1 + 4) / 16)


def test_one_sided_discordance_and_no_discordance():
    assert mcnemar([1] * 5, [0] * 5)["p_value"] == pytest.approx(2 / 32)
    assert mcnemar([1, 0], [1, 0])["p_value"] == 1.0
    assert mcnemar([1, 0, 1], [0, 1, 1])["p_value"] == 1.0  # capped: symmetric discordance


def test_unpaired_lengths_are_refused():
    with pytest.raises(ValueError, match="different lengths"):
        mcnemar([1, 0], [1])
