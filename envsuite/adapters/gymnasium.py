"""A catalog env as a real ``gymnasium.Env``, for users' own reset/step loops.

Three modes:

* ``mode="tokens"`` (default): observation = prompt token ids (``np.int64`` array), action = the reply's
  token ids (include the end-of-turn token for a clean stop, as a sampler would).
* ``mode="text"``: observation = the rendered prompt text, action = the reply text (the adapter tokenizes
  it and appends the renderer's end-of-turn token, so a text reply is always a clean stop).
* ``mode="chat"``: observation = the conversation as a tuple of ``{"role", "content"}`` messages (what a
  chat-completions API takes), action = the reply text or an assistant message dict; for loops that
  drive an API model, which renders the conversation its own way. Vector envs in chat mode pass
  observations by pickling (``shared_memory=False``).

Observations are bounded (``observation_space.max_length``: ``2 * max_context_tokens`` tokens, or 32
characters per token in text mode). Only a final observation can be longer (the conversation plus the
last action); it is cut to the bound and ``info["observation_cut_from"]`` holds its full length. Bounded
observations let ``AsyncVectorEnv`` / ``gymnasium.make_vec(..., vectorization_mode="async")`` pass them
through shared memory (the default) in both modes.

``reset(seed=s)`` starts a fresh single-use catalog env on episode seed ``s`` (without a seed, the
gym env's own ``np_random`` picks one). ``info`` carries the stop condition, the conversation as chat
messages, the env's metrics and logs, and on the last step the stop reason. A prompt that does not fit
``max_context_tokens`` gives an empty observation with ``info["prompt_overflow"]``; the next step ends
the episode with the sentinel's reward and ``stop_reason == "max_tokens"`` (tinker-cookbook's meaning).

Catalog ids are mirrored into gymnasium's registry as ``envsuite/<id>``, namespaced ids included:
``gymnasium.make("envsuite/arithmetic")`` and ``gymnasium.make("envsuite/textarena/TicTacToe-v0")``.
gymnasium's id pattern does not allow a ``/`` inside a name, so importing envsuite widens it to allow one
(every id that parsed before parses the same way).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Awaitable, Mapping, Sequence
from typing import Literal, TypeAlias, TypeVar

import gymnasium
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from envsuite.adapters._gym_spaces import (
    ChatMessages,
    ChatObservation,
    ChatTurn,
    PromptText,
    TokenIds,
    TokenSequence,
)
from envsuite.catalog._make import DEFAULT_MAX_CONTEXT_TOKENS, RendererConfig, _renderer_config, make_env
from envsuite.catalog.registration import EnvSpec, spec
from envsuite.core import (
    Env,
    InitialObservationOverflow,
    StopCondition,
    as_overflow,
    stop_reason_from_metrics,
)
from envsuite.renderers import reply_to_tokens

Mode = Literal["tokens", "text", "chat"]
GymObservation: TypeAlias = TokenIds | str | ChatObservation
"""Per mode: token ids, the prompt text, or the conversation."""
GymAction: TypeAlias = NDArray[np.integer] | Sequence[int] | str | Mapping[str, object]
"""Per mode: the reply's token ids, its text, or (chat mode) its text or an assistant message."""
Info: TypeAlias = dict[str, object]
"""``info`` of ``reset``/``step``; its keys and their values are listed in the module docstring."""
_T = TypeVar("_T")
GYM_NAMESPACE = "envsuite"
_CHARS_PER_TOKEN_BOUND = 32
_CHAT_MESSAGES_BESIDE_TURNS = 8


class GymEnv(gymnasium.Env[GymObservation, GymAction]):
    """A catalog env behind the gymnasium API (see the module docstring)."""

    metadata = {"render_modes": ["ansi", "human"]}  # noqa: RUF012  (gymnasium reads a class dict)

    def __init__(
        self,
        env_id: str,
        *,
        mode: Mode = "tokens",
        model: str | None = None,
        renderer: RendererConfig | str | None = None,
        split: Literal["train", "test"] = "train",
        max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
        render_mode: str | None = None,
        **env_kwargs: object,
    ) -> None:
        if mode not in ("tokens", "text", "chat"):
            raise ValueError(f"mode must be 'tokens', 'text' or 'chat', not {mode!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        self.env_spec: EnvSpec = spec(env_id)
        self.env_kwargs = self.env_spec.resolve_kwargs(env_kwargs)
        self.mode: Mode = mode
        self.render_mode = render_mode
        self.split: Literal["train", "test"] = split
        self.max_context_tokens = max_context_tokens
        self.renderer_config = _renderer_config(renderer, model)
        self._renderer = self.renderer_config.build()
        vocab_size = self._renderer.vocab_size
        self.max_observation_tokens = 2 * max_context_tokens
        if mode == "tokens":
            self.observation_space: TokenSequence | PromptText | ChatMessages = TokenSequence(
                vocab_size, self.max_observation_tokens
            )
            self.action_space: spaces.Sequence | PromptText = spaces.Sequence(
                spaces.Discrete(vocab_size), stack=True
            )
        elif mode == "chat":
            # A turn adds at most two messages (the reply and what answers it), besides a system prompt
            # and the first user message.
            max_messages = 2 * (self.env_spec.max_turns or 1) + _CHAT_MESSAGES_BESIDE_TURNS
            chars = self.max_observation_tokens * _CHARS_PER_TOKEN_BOUND
            self.observation_space = ChatMessages(max_messages, chars)
            self.action_space = PromptText(max_context_tokens * _CHARS_PER_TOKEN_BOUND)
        else:
            self.observation_space = PromptText(self.max_observation_tokens * _CHARS_PER_TOKEN_BOUND)
            self.action_space = PromptText(max_context_tokens * _CHARS_PER_TOKEN_BOUND)
        self._loop = asyncio.new_event_loop()
        self._env: Env | None = None
        self._stop: StopCondition = []
        self._overflow: InitialObservationOverflow | None = None
        self._done = True

    # -- gymnasium API ----------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> tuple[GymObservation, Info]:
        super().reset(seed=seed)
        episode_seed = seed if seed is not None else int(self.np_random.integers(0, 2**62))
        self._env = make_env(
            self.env_spec.id,
            seed=episode_seed,
            split=self.split,
            model=None,  # the renderer config names the model
            renderer=self.renderer_config,
            max_context_tokens=self.max_context_tokens,
            **self.env_kwargs,
        )
        start = self._run(self._env.initial_observation())
        self._done = False
        info: Info = {"episode_seed": episode_seed}
        overflow = as_overflow(start)
        if overflow is not None:
            self._overflow, self._stop = overflow, []
            info |= {"prompt_overflow": overflow, "stop_condition": [], "conversation": []}
            return self._encode_observation([]), info
        self._overflow = None
        ob, self._stop = start  # type: ignore[misc]  # not an overflow, so the (observation, stop) pair
        info |= {"stop_condition": list(self._stop), "conversation": self._env.conversation()}
        return self._encode_observation(ob.to_ints()), info

    def step(self, action: GymAction) -> tuple[GymObservation, float, bool, bool, Info]:
        if self._env is None or self._done:
            raise RuntimeError("call reset() before step(); the episode is over")
        if self._overflow is not None:
            self._done = True
            overflow = self._overflow
            overflow_info: Info = {
                "stop_reason": stop_reason_from_metrics(overflow.metrics),
                "metrics": dict(overflow.metrics),
                "logs": dict(overflow.logs),
            }
            return self._encode_observation([]), float(overflow.reward), True, False, overflow_info
        result = self._run(self._env.step(self._action_tokens(action)))
        self._done = result.episode_done
        self._stop = result.next_stop_condition
        info: Info = {
            "stop_condition": list(result.next_stop_condition),
            "conversation": self._env.conversation(),
            "metrics": dict(result.metrics),
            "logs": dict(result.logs),
        }
        if result.episode_done:
            info["stop_reason"] = getattr(result, "stop_reason", None) or stop_reason_from_metrics(
                result.metrics
            )
        obs = self._bounded(self._encode_observation(result.next_observation.to_ints()), info)
        return obs, float(result.reward), result.episode_done, False, info

    def render(self) -> str | None:
        text = self._conversation_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.close()
        super().close()

    # -- helpers ----------------------------------------------------------------------------------

    def _run(self, coro: Awaitable[_T]) -> _T:
        """Run a coroutine of the wrapped env; works even when called from inside a running loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coro)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(self._loop.run_until_complete, coro).result()

    def _encode_observation(self, tokens: list[int]) -> GymObservation:
        if self.mode == "tokens":
            return np.asarray(tokens, dtype=np.int64)
        if self.mode == "chat":
            if self._overflow is not None or self._env is None:
                return ()
            return tuple(
                ChatTurn(role=str(m.get("role", "user")), content=str(m.get("content") or ""))
                for m in self._env.conversation()
            )
        return self._renderer.tokenizer.decode(tokens, skip_special_tokens=False)

    def _bounded(self, obs: GymObservation, info: Info) -> GymObservation:
        """``obs`` cut to the observation space's bound (only a final observation can exceed it)."""
        space = self.observation_space
        if isinstance(space, ChatMessages):
            if not isinstance(obs, tuple):
                raise TypeError(f"chat mode observes a conversation, not {type(obs).__name__}")
            cut = tuple(
                ChatTurn(role=m["role"], content=m["content"][: space.max_chars])
                for m in obs[-space.max_messages :]
            )
            if cut != obs:
                info["observation_cut_from"] = len(obs)
            return cut
        if len(obs) > space.max_length:
            info["observation_cut_from"] = len(obs)
            return obs[: space.max_length]
        return obs

    def _action_tokens(self, action: GymAction) -> list[int]:
        if self.mode == "tokens":
            # object dtype keeps ids too large for int64 as Python ints, so the env can name them
            return [int(t) for t in np.asarray(action, dtype=object).reshape(-1)]
        reply = action.get("content") if self.mode == "chat" and isinstance(action, Mapping) else action
        if not isinstance(reply, str):
            raise TypeError(f"{self.mode} mode expects a str action, got {type(reply).__name__}")
        return reply_to_tokens(self._renderer, reply, self._stop)

    def _conversation_text(self) -> str:
        if self._env is None:
            return ""
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self._env.conversation())


def make(
    env_id: str,
    *,
    mode: Mode = "tokens",
    model: str | None = None,
    renderer: RendererConfig | str | None = None,
    split: Literal["train", "test"] = "train",
    max_context_tokens: int = DEFAULT_MAX_CONTEXT_TOKENS,
    render_mode: str | None = None,
    **env_kwargs: object,
) -> GymEnv:
    """A ``gymnasium.Env`` for catalog env ``env_id`` (see the module docstring for the two modes)."""
    return GymEnv(
        env_id,
        mode=mode,
        model=model,
        renderer=renderer,
        split=split,
        max_context_tokens=max_context_tokens,
        render_mode=render_mode,
        **env_kwargs,
    )


def gymnasium_id(env_id: str) -> str:
    """The id a catalog env has in gymnasium's registry: ``envsuite/<catalog id>``."""
    return f"{GYM_NAMESPACE}/{env_id}"


_GYM_ID_WITH_SLASHES = re.compile(
    r"^(?:(?P<namespace>[\w:-]+)\/)?(?:(?P<name>[\w:./-]+?))(?:-v(?P<version>\d+))?$"
)
"""gymnasium's own id pattern with ``/`` also allowed in the name (the namespace stays slash-free)."""


def _allow_slashes_in_gymnasium_names() -> None:
    """Let gymnasium parse ``envsuite/textarena/TicTacToe-v0`` (namespace ``envsuite``, name
    ``textarena/TicTacToe``). Every id gymnasium accepted before parses exactly as it did."""
    from gymnasium.envs import registration

    registration.ENV_ID_RE = _GYM_ID_WITH_SLASHES


def mirror_to_gymnasium(env_spec: EnvSpec) -> None:
    """Register one catalog spec with gymnasium (idempotent)."""
    _allow_slashes_in_gymnasium_names()
    gym_id = gymnasium_id(env_spec.id)
    if gym_id in gymnasium.registry:
        return
    try:
        gymnasium.register(
            id=gym_id, entry_point="envsuite.adapters.gymnasium:GymEnv", kwargs={"env_id": env_spec.id}
        )
    except gymnasium.error.Error:
        # An id gymnasium cannot express is still fully usable through envsuite.make.
        return
