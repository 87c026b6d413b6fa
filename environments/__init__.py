"""Gymnasium coding environments. Importing this package registers:

    composer/BugFix-v0       fix a planted bug in real code (HumanEval + hand-written repos)
    composer/Implement-v0    implement from signature + docstring (LeetCode train, HumanEval eval)
    composer/LongHorizon-v0  carry facts across context resets (chain of notes)
    composer/RealRepos-v0    fix a bug in a real PyPI package, graded by the project's own tests
    composer/Toy-v0          one turn, reward = "a" in the action (tests and benches of RL machinery)

Create with `gymnasium.make(id, split=..., max_turns=..., backend=..., suite_options={...})`.
"""
import gymnasium

ENV_IDS = {
    "composer/BugFix-v0": "BugFix",
    "composer/Implement-v0": "Implement",
    "composer/LongHorizon-v0": "LongHorizon",
    "composer/RealRepos-v0": "RealRepos",
}

for _env_id, _suite in ENV_IDS.items():
    if _env_id not in gymnasium.registry:
        gymnasium.register(_env_id, entry_point="environments.coding_env:CodingEnv", kwargs={"suite": _suite})

# The RL machinery's test env (fleet, async, schedulers): no sandbox, reward = 'a' in the action.
if "composer/Toy-v0" not in gymnasium.registry:
    gymnasium.register("composer/Toy-v0", entry_point="environments.toy:ToyEnv")
