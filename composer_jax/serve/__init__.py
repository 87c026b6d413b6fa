"""Serving the policy to agent harnesses: an OpenAI-compatible endpoint on the rollout engine
(app.py, server.py), continuous batching (scheduler.py), OpenAI <-> harness protocol (chat.py),
and token-exact session records that become Episodes for the learner (sessions.py).

    python -m composer_jax.serve --config configs/tiny.py:test --port 8000
"""
