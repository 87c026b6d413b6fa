"""mini-swe-agent, unmodified, with its shell commands bridged to the parent's sandbox.

Run by the harness's own venv (no composer_jax import): `python mini_swe_agent_runner.py`. The
first stdin line is the spec (JSON); then every command the agent wants to run is written to
stdout as {"command": str} and answered on stdin by {"output": str, "returncode": int} (the
parent ran it in the task's sandboxed workspace). The last stdout line is {"done": exit status,
"submitted": bool}. The agent, its prompts (the `mini` config), its tool schema and its litellm
model client are mini-swe-agent's own; only where a command runs is ours.
"""
import json
import os
import sys

PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1)  # the parent reads only these lines
os.dup2(2, 1)  # whatever else prints (litellm, rich) goes to stderr
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def main() -> None:
    spec = json.loads(sys.stdin.readline())
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_path
    from minisweagent.exceptions import Submitted
    from minisweagent.models.litellm_model import LitellmModel

    class BridgeEnvironment:
        """mini-swe-agent's Environment interface; commands run where the parent says."""

        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
            PROTOCOL.write(json.dumps({"command": action.get("command", "")}) + "\n")
            reply = json.loads(sys.stdin.readline())
            output = {"output": reply["output"], "returncode": reply["returncode"], "exception_info": ""}
            lines = output["output"].lstrip().splitlines(keepends=True)
            if lines and lines[0].strip() == SUBMIT and output["returncode"] == 0:  # as LocalEnvironment
                submission = "".join(lines[1:])
                raise Submitted({"role": "exit", "content": submission,
                                 "extra": {"exit_status": "Submitted", "submission": submission}})
            return output

        def get_template_vars(self, **kwargs) -> dict:
            return {"system": "Linux", "release": "", "version": "", "machine": "x86_64", "cwd": "", **kwargs}

        def serialize(self) -> dict:
            return {"info": {"config": {"environment_type": "composer_jax.sandbox"}}}

    config = yaml.safe_load(get_config_path(spec["config"]).read_text())["agent"]
    config.update(step_limit=int(spec["step_limit"]), cost_limit=0.0, output_path=None)
    model = LitellmModel(model_name="openai/" + spec["model"], cost_tracking="ignore_errors", model_kwargs={
        "api_base": spec["base_url"], "api_key": "unused", "temperature": spec["temperature"], "top_p": spec["top_p"],
        "max_tokens": spec["max_tokens"], "seed": spec["seed"], "num_retries": 0,
        "extra_headers": {"x-session-id": spec["session_id"]}})
    agent = DefaultAgent(model, BridgeEnvironment(), **config)
    try:
        result = agent.run(spec["task"])
        status = result.get("exit_status", "")
    except Exception as e:  # noqa: BLE001 - reported to the parent, which grades what is there
        status = f"{type(e).__name__}: {e}"[:500]
    PROTOCOL.write(json.dumps({"done": status, "submitted": status == "Submitted", "steps": agent.n_calls}) + "\n")


if __name__ == "__main__":
    main()
