"""Experiments: a recipe is a config file with an `experiment` block (configs/rl_longhorizon.py,
rl_bugfix.py, rl_horizon.py, qwen_coder_0p5b.py:bugfix; every setting and the command in its
docstring), and one runner executes any of them: SFT runs, RL arms on one budget, every policy
on the same held-out episodes, paired McNemar tests, one result schema.

    python -m composer_jax.experiments.run --config configs/rl_bugfix.py:drills --workdir W --out F.json
    python -m composer_jax.experiments.pool A.json B.json --out pooled.json   # seeds pooled

Modules: config (the typed `experiment` block), run (the stages), records (the result schema,
its plot), pool (several seeds). Notebooks and tests import these; benchmarks/ only measures.
"""
