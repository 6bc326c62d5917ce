"""``tools/kv_store``: a key-value store the model must read and change through tools to reach a goal.

The tools share the episode's store: ``get(key)``, ``set(key, value)``, ``delete(key)``, ``keys()``, and
``done()`` (ends the episode, ``StopReason.TOOL_STOPPED``; a reply without calls ends it too). Each seed
fills the store with a few keys (words, with small numbers or words as values, which the model cannot
see without asking) and draws a task:

* ``set``: set a key to a given value (one call);
* ``add``: add a number to a key's value (read, then write);
* ``rename``: move a value to a new key (read, write, delete).

The episode is graded on the store when it ends: it must equal the goal state exactly (the task done,
nothing else changed). Values are stored as text (numbers as their digits).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from envsuite.core import EnvContext, Message, Tool, ToolCall, ToolFailure, ToolResult, tool
from envsuite.envs._problem import draw_for_split
from envsuite.envs.tool_use._env import DEFAULT_FORMAT_COEF, Score, ToolUseEnv

TASKS = ("set", "add", "rename")
TOOL_NAMES = ("get", "set", "delete", "keys", "done")
_KEYS = (
    "apples", "pears", "plums", "limes", "figs", "grapes", "melons", "lemons", "cherries", "peaches",
    "color", "city", "pet", "planet", "metal", "flower", "sport", "drink", "tool", "season",
)  # fmt: skip
_WORDS = ("red", "blue", "green", "paris", "lima", "cat", "dog", "mars", "iron", "tin", "rose", "tea", "saw")
_TASK_TEXT = {
    "set": "Set the key '{key}' to '{value}'.",
    "add": "Add {amount} to the number stored under the key '{key}'.",
    "rename": "Rename the key '{key}' to '{new_key}', keeping its value.",
}
SUFFIX = " Use the tools, then reply 'done'."


@dataclass(frozen=True)
class Goal:
    """A task and the store it must leave behind."""

    task: str
    text: str
    start: dict[str, str]
    end: dict[str, str]


def draw_goal(rng: random.Random, tasks: Sequence[str], n_keys: int) -> Goal:
    """A store of ``n_keys`` keys and one task of a kind in ``tasks``."""
    keys = rng.sample(_KEYS, n_keys + 1)
    start = {k: str(rng.randint(1, 99)) if k in _KEYS[:10] else rng.choice(_WORDS) for k in keys[:-1]}
    start[keys[0]] = str(rng.randint(1, 99))  # an "add" task always has a number to add to
    task = rng.choice(list(tasks))
    end = dict(start)
    if task == "set":
        key = rng.choice(keys)
        value = rng.choice([w for w in _WORDS if w != start.get(key)])
        end[key] = value
        text = _TASK_TEXT["set"].format(key=key, value=value)
    elif task == "add":
        key = rng.choice([k for k in keys[:-1] if start[k].isdigit()])
        amount = rng.randint(2, 19)
        end[key] = str(int(start[key]) + amount)
        text = _TASK_TEXT["add"].format(amount=amount, key=key)
    else:
        key, new_key = rng.choice(keys[:-1]), keys[-1]
        end[new_key] = end.pop(key)
        text = _TASK_TEXT["rename"].format(key=key, new_key=new_key)
    return Goal(task, text, start, end)


class Store:
    """One episode's store and the tools that read and change it (bound methods, sharing the state)."""

    def __init__(self, start: dict[str, str]) -> None:
        self.data = dict(start)

    @tool
    def get(self, key: Annotated[str, "The key to read"]) -> str:
        """Read the value stored under a key."""
        if key not in self.data:
            raise ToolFailure(f"no key {key!r}")
        return self.data[key]

    @tool
    def set(self, key: Annotated[str, "The key to write"], value: Annotated[str | int, "The value"]) -> str:
        """Store a value under a key (creates the key or replaces its value)."""
        if not key.strip() or len(key) > 40 or len(str(value)) > 200:
            raise ToolFailure("keys must be 1-40 characters and values at most 200")
        self.data[key] = str(value)
        return "ok"

    @tool
    def delete(self, key: Annotated[str, "The key to remove"]) -> str:
        """Remove a key and its value."""
        if self.data.pop(key, None) is None:
            raise ToolFailure(f"no key {key!r}")
        return "ok"

    @tool
    def keys(self) -> str:
        """List the keys in the store."""
        return ", ".join(sorted(self.data)) or "(empty)"

    @tool
    def done(self) -> ToolResult:
        """Say the task is finished (ends the episode)."""
        return ToolResult([{"role": "tool", "content": "ok"}], should_stop=True)


class KVStoreEnv(ToolUseEnv):
    """Change a key-value store to a goal state through its tools (see the module docstring)."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        tasks: Sequence[str] = TASKS,
        tools: Sequence[str] = TOOL_NAMES,
        n_keys: int = 4,
        max_turns: int = 6,
        max_tool_calls: int = 8,
        system_prompt: str | None = None,
        demonstrate: bool = False,
        tool_use_reward: float = 0.0,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``tasks``: kinds to draw from (``set``, ``add``, ``rename``); ``tools``: which of ``get``, ``set``,
        ``delete``, ``keys``, ``done`` the model gets; ``n_keys``: keys in the store at the start (1-9)."""
        super().__init__(
            ctx,
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            system_prompt=system_prompt,
            demonstrate=demonstrate,
            tool_use_reward=tool_use_reward,
            format_coef=format_coef,
        )
        if not tasks or set(tasks) - set(TASKS) or not tools or set(tools) - set(TOOL_NAMES):
            raise ValueError(f"tasks must be a subset of {TASKS} and tools of {TOOL_NAMES}")
        if not 1 <= n_keys <= 9:
            raise ValueError(f"n_keys must be in 1..9, got {n_keys}")
        rng = random.Random(ctx.seed)
        self.goal = draw_for_split(
            lambda: draw_goal(rng, tasks, n_keys), lambda g: repr(sorted(g.start.items())) + g.text, ctx.split
        )
        self.store = Store(self.goal.start)
        self._tools: list[Tool] = [getattr(self.store, name) for name in TOOL_NAMES if name in tools]
        self._tool_names = frozenset(tools)

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def task(self) -> str:
        return self.goal.text + SUFFIX

    def demonstration(self) -> list[Message]:
        call = ToolCall.create("set", {"key": "hat", "value": "wool"}, "call_example")
        return [
            {"role": "user", "content": _TASK_TEXT["set"].format(key="hat", value="wool") + SUFFIX},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "ok", "tool_call_id": "call_example", "name": "set"},
        ]

    def reference_reply(self) -> str | None:
        """The calls that turn the start store into the goal, then ``done()`` (or, without that tool, the
        junk turn after it answers and ends the episode); None when the tools cannot reach the goal."""
        start, end = self.goal.start, self.goal.end
        calls = [
            ToolCall.create("set", {"key": k, "value": v}, f"probe_set_{k}")
            for k, v in end.items()
            if start.get(k) != v
        ]
        calls += [ToolCall.create("delete", {"key": k}, f"probe_delete_{k}") for k in start if k not in end]
        calls += [ToolCall.create("done", {}, "probe_done")] if "done" in self._tool_names else []
        needed = {call.function.name for call in calls}
        if not needed <= self._tool_names or len(calls) > self.max_tool_calls:
            return None
        return self.reply_with_calls(calls)

    def idle_answer(self) -> str:
        return "done"

    def idle_call(self) -> ToolCall:
        return ToolCall.create("get", {"key": next(iter(self.goal.start))}, "probe_idle")

    async def score(self, answer: str | None) -> Score:
        reference = ", ".join(f"{k}={v}" for k, v in sorted(self.goal.end.items()))
        reached = self.store.data == self.goal.end
        changed = sorted(
            k
            for k in set(self.store.data) | set(self.goal.start)
            if self.store.data.get(k) != self.goal.start.get(k)
        )
        return Score(reached, reference, f"changed: {', '.join(changed) or 'nothing'}")
