"""The wire types of a served catalog env: OpenEnv's pydantic Action/Observation/State, extended.

An action is the model's reply, as ``text`` (what most OpenEnv trainers send) or as exact ``tokens``
of the server's tokenizer. An observation carries the conversation (``messages``), the prompt as
token ids, the stop condition, and on the last step why the episode stopped and the env's metrics.
"""

from __future__ import annotations

from typing import TypedDict

from openenv.core import Action, Observation, State
from pydantic import Field, model_validator


class EnvsuiteAction(Action):
    """One reply: ``text`` (rendered to tokens with the env's renderer) or ``tokens``; exactly one."""

    text: str | None = Field(default=None, description="The reply as text")
    tokens: list[int] | None = Field(
        default=None, description="The reply as token ids of the server's tokenizer"
    )

    @model_validator(mode="after")
    def _one_of(self) -> EnvsuiteAction:
        if (self.text is None) == (self.tokens is None):
            raise ValueError("give exactly one of 'text' and 'tokens'")
        return self


class EnvsuiteObservation(Observation):
    """What the policy sees next (``done``, ``reward`` and ``metadata`` come from OpenEnv's base)."""

    messages: list[dict[str, str]] = Field(default_factory=list, description="The conversation so far")
    prompt_tokens: list[int] = Field(default_factory=list, description="The next prompt as token ids")
    stop: list[int | str] = Field(default_factory=list, description="Stop condition for the next reply")
    stop_reason: str | None = Field(default=None, description="Why the episode ended (last step only)")
    metrics: dict[str, float] = Field(default_factory=dict, description="The env's metrics for this step")
    logs: dict[str, str | bool | int | float] = Field(
        default_factory=dict, description="Diagnostics for people"
    )
    seed: int | None = Field(default=None, description="The episode's seed (replay with reset(seed=...))")


class SpecDocument(TypedDict):
    """What ``GET /envsuite`` answers: enough for a client to build an ``openenv:`` catalog spec."""

    env_id: str
    kind: str
    """An :class:`~envsuite.catalog.registration.EnvKind` value."""
    reward_range: list[float]
    """``[lo, hi]``."""
    max_turns: int | None
    description: str


class EnvsuiteState(State):
    """The session's episode: which env, seed and split, and how many steps so far."""

    env_id: str = ""
    seed: int | None = None
    split: str = "train"
    done: bool = False
