"""Experiments: a recipe in a config file (configs/rl_longhorizon.py, configs/rl_bugfix.py) and
a runner here that trains its arms, evaluates them on the same episodes and writes one result
record (pass rates with Wilson intervals, paired McNemar tests, pooled seeds).

    python -m composer_jax.experiments.longhorizon --workdir runs/rl_bench --final_eval 128
    python -m composer_jax.experiments.bugfix --drills 3000 --out benchmarks/results/rl_bugfix_drills.json

Modules: longhorizon (trained / masked / no summaries on LongHorizon), bugfix (SFT then RL on
BugFix, paired evaluation of checkpoints), records (the JSON result with the machine it ran on).
Notebooks and tests import these; benchmarks/ only measures.
"""
