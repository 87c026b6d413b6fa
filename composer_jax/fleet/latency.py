"""A slow-environment wrapper: fixed extra latency per reset/step, for benchmarks and timeouts."""
from __future__ import annotations

import time

import gymnasium as gym


class LatencyWrapper(gym.Wrapper):
    """Sleeps `latency_s` before every reset and step (a remote sandbox, a slow test suite)."""

    def __init__(self, env: gym.Env, latency_s: float):
        super().__init__(env)
        self.latency_s = latency_s

    def reset(self, **kwargs):
        time.sleep(self.latency_s)
        return self.env.reset(**kwargs)

    def step(self, action):
        time.sleep(self.latency_s)
        return self.env.step(action)
