"""Rubric scores are explicit weighted sums; the judge fails closed."""
import math

import numpy as np
import pytest
from flax import nnx

from composer_jax.data.tokenizer import Tokenizer
from composer_jax.model.config import ModelConfig
from composer_jax.model.transformer import Transformer
from composer_jax.rl import judge as J
from composer_jax.rl.trajectory import Episode, Segment, Turn
from configs.tiny import get_config

ITEMS = [J.RubricItem("key?", "essential"), J.RubricItem("frag?", "important"),
         J.RubricItem("style?", "optional"), J.RubricItem("invented?", "pitfall")]


def test_weighted_aggregation_by_hand():
    assert J.aggregate(ITEMS, [True, True, True, False]) == 1.0
    assert J.aggregate(ITEMS, [True, False, True, False]) == pytest.approx(1.3 / 2.0)
    assert J.aggregate(ITEMS, [True, True, False, True]) == pytest.approx((1.7 - 0.9) / 2.0)
    assert J.aggregate(ITEMS, [False, False, True, True]) == 0.0  # clipped at 0
    custom = [J.RubricItem("a", "essential", weight=3.0), J.RubricItem("b", "optional")]
    assert J.aggregate(custom, [False, True]) == pytest.approx(0.3 / 3.3)


@pytest.mark.parametrize("judge, why", [
    (lambda pairs: [1.0, 1.0, float("nan"), 0.0], "no valid verdict"),
    (lambda pairs: [1.0, 1.0], "2 verdicts"),
    (lambda pairs: [1.0, "yes", 1.0, 0.0], "no valid verdict"),
    (lambda pairs: [1.0, None, 1.0, 0.0], "no valid verdict"),
    (lambda pairs: (_ for _ in ()).throw(TimeoutError("judge down")), "TimeoutError"),
])
def test_judge_fails_closed(judge, why):
    j = J.score_rubric(judge, ITEMS, "text")
    assert j.failed and j.score == 0.0 and why in j.reason


def test_parse_verdict():
    assert J.parse_verdict(" Yes.") == 1.0 and J.parse_verdict("no") == 0.0
    for garbage in ("yes and no", "", "maybe", None, 3):
        assert J.parse_verdict(garbage) is None


def test_model_judge_probability_and_combined_reward():
    tok = Tokenizer.byte_level()
    cfg = ModelConfig.from_config(get_config("test").model)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    mj = J.ModelJudge(graphdef, state, tok, max_len=256, min_mass=0.0)
    out = mj([("Is it blue?", "the sky"), ("Is it red?", "x" * 400)])
    assert len(out) == 2 and all(0.0 <= v <= 1.0 for v in out)
    # a judge whose yes/no mass is below min_mass gives no verdict -> the rubric scores 0
    strict = J.ModelJudge(graphdef, state, tok, max_len=256, min_mass=1.1)
    assert strict([("q", "t")]) == [None]
    assert J.score_rubric(strict, ITEMS[:1], "t").failed

    seg = Segment(prompt=[1])
    body = tok.encode("The access key is K-1.")
    seg.add(body, np.zeros((len(body), 1, 2)), logp=np.zeros(len(body)), policy=True)
    seg.turns.append(Turn("summary", 0, len(body), "summary_close"))
    ep = Episode(0, {}, segments=[seg], reward=1.0)
    assert J.episode_summaries(ep, tok) == ["The access key is K-1."]
    yes = lambda pairs: [1.0] * len(pairs)
    r, counts = J.combine(ep, J.RewardWeights(1.0, 0.5), yes, ITEMS[:2], tok)
    assert r == 1.5 and counts == {"judge_calls": 1, "judge_failures": 0}
    r, counts = J.combine(ep, J.RewardWeights(1.0, 0.5), lambda p: ["garbage"] * len(p), ITEMS[:2], tok)
    assert r == 1.0 and counts["judge_failures"] == 1


def test_longhorizon_rubric_from_task():
    from environments.suites.longhorizon import LongHorizonSuite, make_task
    task = make_task("train", 2, 0, 0)
    items = LongHorizonSuite().summary_rubric(task)  # the suite's hook (TaskSuite.summary_rubric)
    assert [i.kind for i in items] == ["essential", "important", "important", "pitfall"]
    assert "K-" in items[0].criterion and not math.isnan(J.aggregate(items, [True] * 3 + [False]))
