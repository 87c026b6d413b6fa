"""Gymnasium coding environments. Importing this package registers:

    composer/BugFix-v0       fix a planted bug in real code (HumanEval + hand-written repos)
    composer/Implement-v0    implement from signature + docstring (LeetCode train, HumanEval eval)
    composer/LongHorizon-v0  carry facts across context resets (chain of notes)

Create with `gymnasium.make(id, split=..., max_turns=..., backend=..., suite_options={...})`.
"""
import gymnasium

ENV_IDS = {
    "composer/BugFix-v0": "BugFix",
    "composer/Implement-v0": "Implement",
    "composer/LongHorizon-v0": "LongHorizon",
}

for _env_id, _suite in ENV_IDS.items():
    if _env_id not in gymnasium.registry:
        gymnasium.register(_env_id, entry_point="environments.coding_env:CodingEnv", kwargs={"suite": _suite})
