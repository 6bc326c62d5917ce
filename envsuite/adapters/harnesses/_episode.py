"""What every harness bridge shares: where the served model is, how one episode's calls are captured,
its tools run, and its score posted (the capture API of ``envsuite serve``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envsuite.chat import ToolCall
from envsuite.tools import Tool, run_tool_call

if TYPE_CHECKING:
    from envsuite.core import Env


@dataclass(frozen=True)
class ServedModelRef:
    """A model on an ``envsuite serve`` (``url`` without ``/v1``), with the capture set its calls go to."""

    url: str
    model: str
    """What requests name as ``model``: a base model name or a ``tinker://`` sampler path."""
    api_key: str = "tml-local"
    capture_set: str | None = "harness"
    """Calls are captured into this set (``X-Envsuite-Capture``); None: not captured."""

    @property
    def openai_base_url(self) -> str:
        return self.url.rstrip("/") + "/v1"

    def headers(self, episode_id: str) -> dict[str, str]:
        """The capture headers of one episode's calls (every call of it names the episode)."""
        if self.capture_set is None:
            return {}
        return {"X-Envsuite-Capture": self.capture_set, "X-Envsuite-Episode": episode_id}


@dataclass
class HarnessEpisode:
    """One episode a harness played: what it answered, what the env's checks gave, what it called."""

    env_id: str
    seed: int
    episode_id: str
    reward: float
    correct: bool
    answer: str
    tool_calls: list[str] = field(default_factory=list)
    """Each tool call the harness made, as ``name(arguments)`` (arguments cut to 200 characters)."""
    grade: str = ""
    """The checks' own account (``Score.detail``)."""


def new_episode_id() -> str:
    return f"harness-{uuid.uuid4().hex[:16]}"


async def run_tool(tool: Tool, arguments_json: str, *, timeout_s: float | None = 30.0) -> str:
    """Run an env tool on the harness's JSON arguments as envsuite runs any call (``run_tool_call``: the
    arguments checked against the tool's schema, a time limit, a failure the model's error message);
    the text of the messages the model sees."""
    call = ToolCall.create(tool.name, arguments_json or "{}")
    outcome = await run_tool_call([tool], call, timeout_s=timeout_s)
    return "\n".join(str(m.get("content", "")) for m in outcome.messages)


async def post_reward(served: ServedModelRef, episode_id: str, reward: float) -> None:
    """Score the captured episode (``POST /v1/episodes/ID/reward``), so it trains as a rollout."""
    if served.capture_set is None:
        return
    import httpx

    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            f"{served.openai_base_url}/episodes/{episode_id}/reward",
            json={"reward": reward},
            headers={"Authorization": f"Bearer {served.api_key}", **served.headers(episode_id)},
        )
        response.raise_for_status()


async def finish(env: Env, answer: str) -> Any:
    """The env's grade of how the harness left the episode (a ToolUseEnv's ``score``)."""
    score = getattr(env, "score", None)
    if score is None:
        raise TypeError(f"{type(env).__name__} has no score(answer): harnesses play tool-use envs")
    return await score(answer)
