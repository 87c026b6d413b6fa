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


def test_a_mixed_length_suite_interleaves_the_plain_tiers_and_its_caps_cover_the_longest():
    import pytest

    from environments.suites import make_suite

    mixed = make_suite("LongHorizon", hops=4, hops_mix=[2, 16], filler_lines=8, secrets="words",
                       carry="registers", registers=2)
    plain = {h: make_suite("LongHorizon", hops=h, filler_lines=8, secrets="words", carry="registers", registers=2)
             for h in (2, 16)}
    ids = mixed.sample_ids("train", 6)
    assert ids[0::2] == plain[2].sample_ids("train", 3) and ids[1::2] == plain[16].sample_ids("train", 3)
    assert len(set(mixed.task_ids("validation"))) == len(mixed.task_ids("validation"))
    assert mixed.get(ids[1]).task_id == ids[1]
    with pytest.raises(ValueError, match=r"registers=2 must be in \[1, 4\] and <= hops=1"):
        make_suite("LongHorizon", hops=4, hops_mix=[1, 4], secrets="words", carry="registers", registers=2)
    with pytest.raises(ValueError, match=r"hops=900 \(in hops_mix\)"):
        make_suite("LongHorizon", hops_mix=[900])
    for bad in (8, ["8"], [2.5]):
        with pytest.raises(ValueError, match="hops_mix=.* must be a list of chain lengths"):
            make_suite("LongHorizon", hops_mix=bad)

    padded = make_suite("LongHorizon", hops_mix=[2, 16], filler_mix=[8, 0], filler_lines=8, secrets="words",
                        carry="registers", registers=2)
    ids = padded.sample_ids("train", 8)  # within each chain length, padded and unpadded notes in turn
    assert [i.split("/")[1] for i in ids] == ["h2-f8-w-r2", "h16-f8-w-r2", "h2-f0-w-r2", "h16-f0-w-r2"] * 2
    assert len(set(padded.task_ids("train"))) == len(padded.task_ids("train"))
    with_filler, bare = padded.get(ids[0]), padded.get(ids[2])
    assert len(with_filler.files["docs/start.md"].splitlines()) == 8 + 2
    assert len(bare.files["docs/start.md"].splitlines()) == 2  # the key line and the pointer
    with pytest.raises(ValueError, match=r"filler_lines=-1 \(in filler_mix\)"):
        make_suite("LongHorizon", filler_mix=[8, -1])
    with pytest.raises(ValueError, match="filler_mix=.* must be a list"):
        make_suite("LongHorizon", filler_mix=8)
    with pytest.raises(ValueError, match="mix_filler needs mix"):
        load_config("configs/rl_horizon.py:mix_filler")
    c = load_config("configs/rl_horizon.py:mix,mix_filler")
    validate(c)
    assert c.rl.suite_options.filler_mix == (8, 8, 8, 0)
    for name, held_out in c.experiment.evaluations.items():  # held-out sets stay single-filler
        assert held_out.suite_options.filler_mix == (), name

    code = load_config("configs/rl_horizon.py:mix,mix_filler,code")
    validate(code)
    for name, held_out in code.experiment.evaluations.items():  # every set plays the code tier
        assert {**dict(code.rl.suite_options), **held_out.suite_options}["carry"] == "code", name

    c = load_config("configs/rl_horizon.py:mix")
    validate(c)
    longest = max(max(t["hops_mix"]) for t in c.rl.curriculum)
    assert c.rollout.max_segments == c.rl.env_max_turns == max(*c.rl.suite_options.hops_mix, longest) + 4
    for name, held_out in c.experiment.evaluations.items():  # held-out sets stay single-length
        assert held_out.suite_options.hops_mix == (), name


def test_a_sets_measured_horizon_is_played_under_that_sets_caps(monkeypatch):
    """The 10x set's chain (14 notes) is longer than the training caps allow (12 segments): the
    expert must be measured under the set's caps (the runner once cut every long tier to the
    training caps and recorded 30x and 100x as ~12 windows)."""
    import types

    from composer_jax.experiments.config import ExperimentConfig
    from composer_jax.experiments.run import eval_set_rl, expert_windows
    from composer_jax.rl import train

    c = load_config("configs/rl_horizon.py")
    ev = ExperimentConfig.from_config(c.experiment).evaluations["10x"]
    assert c.rollout.max_segments < ev.suite_options["hops"] + 2  # the training caps would cut it
    seen = []

    def demonstrations(cx, ids):
        seen.append((cx.rl.suite_options.hops, cx.rl.env_max_turns, cx.rollout.max_turns, cx.rollout.max_segments))
        return [types.SimpleNamespace(transcript_tokens=1024)]

    monkeypatch.setattr(train, "demonstrations", demonstrations)
    assert expert_windows(c, eval_set_rl(c, ev), ["some-task"], ev.rollout) == 1024 / c.rollout.window
    assert seen == [(14, ev.rl["env_max_turns"], ev.rollout["max_turns"], ev.rollout["max_segments"])]
    assert ev.rollout["max_segments"] >= 14 + 2


def test_qwen_tier_notes_are_shown_whole_by_the_tool(tmp_path):
    """`:qwen` pads notes to a large part of a 4,096-token window, but no note may be longer than
    the tool shows: read_file's observation keeps head and tail of anything over
    observation_chars, and a key line cut from the middle fails the task (at 96 filler lines the
    expert passed 0 of 2 10x tasks). Every note of every set and training tier stays under it,
    and one line more per note would not (the tier is sized to the limit, not below it)."""
    from composer_jax.harness.tools import ToolConfig, read_file
    from composer_jax.experiments.config import ExperimentConfig
    from composer_jax.experiments.run import eval_set_rl
    from configs.rl_horizon import QWEN_FILLER
    from environments.suites import make_suite

    import pytest

    for bad in ("qwen,quick", "qwen,code"):
        with pytest.raises(ValueError, match="qwen is the registers tier"):
            load_config(f"configs/rl_horizon.py:{bad}")
    c = load_config("configs/rl_horizon.py:qwen")
    validate(c)
    limit = ToolConfig().observation_chars
    exp = ExperimentConfig.from_config(c.experiment)
    tiers = [dict(c.rl.suite_options)] + [dict(eval_set_rl(c, ev).suite_options) for ev in exp.evaluations.values()]
    longest = 0
    for options in tiers:
        suite = make_suite("LongHorizon", **options)
        for task_id in suite.sample_ids("validation", 8):
            for path, text in suite.get(task_id).files.items():
                (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / path).write_text(text)
                shown = read_file(str(tmp_path), path).text
                assert len(shown) <= limit, (options, path, len(shown))
                longest = max(longest, len(shown) / max(len(text.splitlines()), 1))
    assert longest * (QWEN_FILLER + 2 + 8) > limit  # ~8 lines more would no longer fit: sized to the limit
