"""mini-swe-agent (PyPI, pinned) as an RL environment: the harness talks to our endpoint, its
shell commands run in our sandbox on the task's workspace, our grader scores the workspace.

    python = ensure_venv()          # its own venv under the cache dir (its deps are not ours)
    result = run_session(env, {"task_id": ...}, base_url=..., model=..., session_id=...)

The harness runs unmodified in a subprocess (mini_swe_agent_runner.py): its `mini` prompts, its
`bash` tool, its litellm client. Each command it issues comes here over a pipe and runs through
`CodingEnv.shell` (the `run` tool's sandbox and limits); when it submits, ends or fails, the
env's `submit` grades the workspace outside any process that ran its commands (grader v2).
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading

from composer_jax.harness.protocol import format_tool_call
from composer_jax.sandbox.runtime import default_cache_dir

NAME, VERSION = "mini-swe-agent", "2.4.6"
RUNNER = pathlib.Path(__file__).with_name("mini_swe_agent_runner.py")


def cache_dir() -> pathlib.Path:
    return pathlib.Path(default_cache_dir()) / "harnesses"


def ensure_venv(root: pathlib.Path | None = None, log=print) -> pathlib.Path:
    """The harness venv's python, built once (pip from the registry) and reused; a half-built
    venv is never used (built beside, then renamed into place under a lock)."""
    root = root or cache_dir()
    final = root / f"{NAME}-{VERSION}"
    python = final / "bin" / "python"
    if python.is_file():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.is_file():
            return python
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{NAME}-", dir=root))
        try:
            log(f"installing {NAME}=={VERSION} into {final} (once) ...")
            subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True, capture_output=True)
            r = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", f"{NAME}=={VERSION}"],
                               capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"pip install {NAME}=={VERSION} failed (is a package registry reachable?):\n"
                                   + r.stderr[-2000:])
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return python


@dataclasses.dataclass
class SessionResult:
    reward: float
    exit_status: str  # the harness's: Submitted, LimitsExceeded, RepeatedFormatError, ...
    commands: int  # shell commands it ran in the sandbox
    task_id: str
    info: dict  # the env's last info (grading details)


def run_session(env, options: dict, *, python: pathlib.Path, base_url: str, model: str, session_id: str,
                temperature: float, top_p: float, max_tokens: int, step_limit: int, seed: int = 0, config: str = "mini",
                timeout_s: float = 1800.0) -> SessionResult:
    """One episode of the harness on the task `options` name; graded by the env whatever way the
    harness ended (a harness that never submits still leaves a workspace to grade). `config`:
    the harness's agent config (a name it ships, or a yaml path)."""
    prompt, info = env.reset(options=options)
    base = env.unwrapped
    spec = dict(task=prompt, base_url=base_url, model=model, session_id=session_id, temperature=temperature,
                top_p=top_p, max_tokens=max_tokens, step_limit=step_limit, seed=seed, config=str(config))
    child_env = {**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(python.parent.parent / "config"),
                 "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.Popen([str(python), str(RUNNER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env)
    stderr: list[str] = []
    drain = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    drain.start()
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    status, commands = "no_result", 0
    try:
        proc.stdin.write(json.dumps(spec) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            msg = json.loads(line)
            if "command" in msg:
                commands += 1
                output, code = base.shell(msg["command"])
                proc.stdin.write(json.dumps({"output": output, "returncode": code}) + "\n")
                proc.stdin.flush()
            elif "done" in msg:
                status = msg["done"]
                break
    except (BrokenPipeError, json.JSONDecodeError) as e:
        status = f"bridge error: {e}"
    finally:
        timer.cancel()
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        drain.join(timeout=5)
    if status == "no_result":
        status = "harness died: " + "".join(stderr)[-500:]
    _, reward, _, _, info = env.step(format_tool_call("submit"))
    return SessionResult(float(reward), status, commands, str(info.get("task_id", options.get("task_id", ""))),
                         dict(info))
