"""mini-swe-agent as a harness: its ``DefaultAgent`` loop, its litellm model over ``envsuite serve``'s OpenAI
routes (captured), and its bash commands run in a workspace episode's sandbox instead of on this machine.

mini-swe-agent 2 asks for one ``bash`` tool call per step and ends when a command prints
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` first (its own rule, kept here), at its step limit, or after
repeated format errors. The workspace's hidden checks then grade what the commands left. litellm, which it
calls through, is pinned in the ``harnesses`` extra (one of its releases was compromised).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from envsuite.adapters.harnesses._episode import (
    HarnessEpisode,
    ServedModelRef,
    finish,
    new_episode_id,
    post_reward,
)
from envsuite.errors import UsageError

if TYPE_CHECKING:
    from envsuite.envs.workspace import WorkspaceSession

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_INSTALL_HINT = "the mini-swe-agent harness needs it: pip install 'envsuite[harnesses]'"


def _stdout_of(text: str) -> str:
    """The stdout part of a workspace call's text (``[stdout]`` ... up to ``[stderr]``)."""
    if "[stdout]\n" not in text:
        return ""
    return text.split("[stdout]\n", 1)[1].split("\n[stderr]\n", 1)[0]


def workspace_environment(session: WorkspaceSession, calls: list[str]) -> Any:
    """A mini-swe-agent environment whose ``execute`` runs each command in ``session``'s sandbox."""
    from minisweagent.environments.local import LocalEnvironment

    class WorkspaceEnvironment(LocalEnvironment):
        def execute(
            self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
        ) -> dict[str, Any]:
            command = str(action.get("command", ""))
            calls.append(f"bash({command[:200]!r})")
            result = session.run_shell(command)
            code = result.exit_code if result.exit_code is not None else -1
            output = {"output": result.text, "returncode": code, "exception_info": ""}
            stdout = _stdout_of(result.text).lstrip().splitlines()
            if stdout and stdout[0].strip() == SUBMIT_MARKER and code == 0:
                self._check_finished({"output": "\n".join(stdout) + "\n", "returncode": 0})
            return output

    return WorkspaceEnvironment()


async def run_mini_swe_agent_episode(
    env_id: str,
    served: ServedModelRef,
    *,
    seed: int = 0,
    split: str = "test",
    step_limit: int = 4,
    max_tokens: int = 256,
    temperature: float = 1.0,
    every_step_calls: bool = True,
) -> HarnessEpisode:
    """Play episode ``seed`` of the workspace env ``env_id`` with mini-swe-agent against ``served``.

    ``every_step_calls``: ask the server for ``tool_choice: "required"`` (mini-swe-agent requires a bash
    call in every reply anyway; a small model otherwise rarely writes one)."""
    # litellm fetches a model price list from the network on import unless told to use its own copy.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import yaml
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import builtin_config_dir
        from minisweagent.models.litellm_model import LitellmModel
    except ImportError:
        raise UsageError(_INSTALL_HINT) from None
    import asyncio

    from envsuite import make_env

    env = make_env(env_id, seed=seed, split=split)  # type: ignore[arg-type]
    await env.initial_observation()  # lays out the workspace
    session = getattr(env, "session", None)
    if session is None:
        raise UsageError(f"{env_id} is not a workspace env: mini-swe-agent needs a shell")
    episode_id = new_episode_id()
    calls: list[str] = []
    kwargs: dict[str, Any] = {
        "api_base": served.openai_base_url,
        "api_key": served.api_key,
        "extra_headers": served.headers(episode_id),
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    if every_step_calls:
        kwargs["tool_choice"] = "required"
    model = LitellmModel(
        model_name=f"openai/{served.model}", model_kwargs=kwargs, cost_tracking="ignore_errors"
    )
    config = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())["agent"]
    config |= {"step_limit": step_limit, "cost_limit": 0.0, "output_path": None}
    agent = DefaultAgent(model, workspace_environment(session, calls), **config)
    task = getattr(env, "task", lambda: "")()
    result = await asyncio.to_thread(agent.run, task)
    answer = str(result.get("submission", "") or "")
    score = await finish(env, answer)
    reward = 1.0 if score.correct else 0.0
    await post_reward(served, episode_id, reward)
    return HarnessEpisode(env_id, seed, episode_id, reward, score.correct, answer, calls, score.detail)
