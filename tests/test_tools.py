"""The tool contract (``@tool``, ``run_tool_call``), the safe calculator, and the tool-use env families.

Episodes are scripted: each reply is written as a message (its calls in the renderer's syntax) and
sent as the tokens a cleanly stopping sampler would produce.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env

import envsuite
from envsuite.core import (
    Env,
    Message,
    StepResult,
    StopReason,
    ToolCall,
    ToolError,
    ToolFailure,
    ToolInput,
    ToolResult,
    UnparsedToolCall,
    run_tool_call,
    tool,
    tool_spec,
)
from envsuite.envs.tool_use import CalculatorError, build_atlas, evaluate, load_atlas, search_atlas
from envsuite.renderers import reply_message_tokens, reply_to_tokens
from tests.conftest import TEST_MODEL

TOOL_IDS = sorted(
    s.id for s in envsuite.registry.all_specs() if "tool-use" in s.tags and s.id.startswith("tools/")
)
"""The tool-use envs of the ``tools/`` family (BFCL's are tool-use too: tests/test_bfcl.py)."""


# ---- @tool and run_tool_call ------------------------------------------------------------------


@tool
def add(a: Annotated[int, "The first number"], b: int = 1) -> int:
    """Add two integers."""
    return a + b


@tool
async def slow(seconds: float) -> str:
    """Sleep."""
    await asyncio.sleep(seconds)
    return "awake"


@tool
def shout(text: str) -> ToolResult:
    """Stop the episode."""
    return ToolResult([{"role": "tool", "content": text.upper() * 100}], should_stop=True)


@tool
def broken() -> str:
    """Raise."""
    raise RuntimeError("kaput")


def run(call: ToolCall | UnparsedToolCall, **kwargs: Any) -> Any:
    return asyncio.run(run_tool_call([add, slow, shout, broken], call, **kwargs))


def test_tool_declares_name_description_and_a_schema_from_the_signature() -> None:
    assert tool_spec(add) == {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "The first number"},
                "b": {"type": "integer", "default": 1},
            },
            "required": ["a"],
            "additionalProperties": False,
        },
    }


def test_a_call_runs_and_its_result_is_a_tool_message_for_that_call() -> None:
    outcome = run(ToolCall.create("add", {"a": 2, "b": 3}, "c1"))
    assert outcome.ok and not outcome.should_stop
    assert outcome.messages == [{"role": "tool", "content": "5", "tool_call_id": "c1", "name": "add"}]


@pytest.mark.parametrize(
    ("call", "kind", "says"),
    [
        (UnparsedToolCall.create("<tool_call>{", "invalid JSON: ..."), ToolError.UNPARSED, "could not read"),
        (
            ToolCall.create("sub", {}, "c"),
            ToolError.UNKNOWN_TOOL,
            "unknown tool 'sub'; the tools are: add, broken",
        ),
        (ToolCall.create("add", {"b": 2}, "c"), ToolError.BAD_ARGUMENTS, "missing argument 'a'"),
        (
            ToolCall.create("add", {"a": "two"}, "c"),
            ToolError.BAD_ARGUMENTS,
            "'a' must be integer, got string",
        ),
        (ToolCall.create("add", {"a": 1, "c": 2}, "c"), ToolError.BAD_ARGUMENTS, "unexpected argument 'c'"),
        (ToolCall.create("add", "[1, 2]", "c"), ToolError.BAD_ARGUMENTS, "not a JSON object"),
        (ToolCall.create("broken", {}, "c"), ToolError.FAILED, "broken failed: RuntimeError: kaput"),
    ],
)
def test_every_bad_call_is_an_error_message_never_an_exception(call: Any, kind: ToolError, says: str) -> None:
    outcome = run(call)
    assert outcome.error is kind
    (message,) = outcome.messages
    assert (
        message["role"] == "tool" and message["content"].startswith("Error: ") and says in message["content"]
    )


def test_time_limit_stop_flag_and_long_results() -> None:
    assert run(ToolCall.create("slow", {"seconds": 5}, "c"), timeout_s=0.05).error is ToolError.TIMEOUT
    stopped = run(ToolCall.create("shout", {"text": "hey"}, "c"), max_chars=50)
    assert stopped.should_stop and stopped.ok
    assert (
        stopped.messages[0]["content"].startswith("HEY" * 16)
        and "250 more characters cut" in stopped.messages[0]["content"]
    )


def test_tools_as_methods_share_their_objects_state() -> None:
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        @tool
        def bump(self, by: int) -> int:
            """Add to the counter."""
            self.n += by
            return self.n

    one, two = Counter(), Counter()
    asyncio.run(one.bump.run(ToolInput({"by": 2})))
    asyncio.run(run_tool_call([one.bump], ToolCall.create("bump", {"by": 3}, "c")))
    assert (one.n, two.n) == (5, 0)
    assert "self" not in tool_spec(one.bump)["parameters"]["properties"]


def test_direct_run_validates_and_reports_like_tinker_cookbooks_tools() -> None:
    result = asyncio.run(add.run(ToolInput({"a": [1]}, "c9")))
    assert result.metadata == {"error": "bad_arguments"} and "a: " in result.messages[0]["content"]
    failure = asyncio.run(
        tool(lambda: (_ for _ in ()).throw(ToolFailure("nope")), name="f").run(ToolInput({}))
    )
    assert failure.messages[0]["content"] == "Error: nope"


# ---- the calculator -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        ("48213 * 9127", "440040051"),
        ("1,234 + 1", "1235"),
        ("2^10 - 24 =", "1000"),
        ("7 / 2", "3.5"),
        ("1 / 3", "0.3333333333"),
        ("-(3 - 10) // 2", "3"),
        ("2 ** -2", "0.25"),
        ("12 × 3 ÷ 4", "9"),
    ],
)
def test_calculator_is_exact(expression: str, text: str) -> None:
    assert evaluate(expression).text == text


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("__import__('os').system('x')", "not"),
        ("(1).__class__", "Attribute"),
        ("x + 1", "the name 'x'"),
        ("9 ** 9 ** 9", "too large"),
        ("10 ** 1000", "too large"),
        ("1 / 0", "division by zero"),
        ("2 ** 0.5", "whole-number"),
        ("1 +" * 200, "longer than"),
        ("[1, 2]", "List"),
        ("'a' * 3", "literal 'a'"),
        ("", "empty"),
    ],
)
def test_calculator_refuses_everything_but_bounded_arithmetic(expression: str, why: str) -> None:
    with pytest.raises(CalculatorError, match=why):
        evaluate(expression)


# ---- scripted episodes ----------------------------------------------------------------------------


def call_reply(env: Env, *calls: ToolCall, content: str = "") -> list[int]:
    message: Message = {"role": "assistant", "content": content, "tool_calls": list(calls)}
    return reply_message_tokens(env.ctx.renderer, message)  # type: ignore[attr-defined]


def text_reply(env: Env, text: str) -> list[int]:
    return reply_to_tokens(env.ctx.renderer, text)  # type: ignore[attr-defined]


def play(env: Env, actions: list[Any]) -> list[StepResult]:
    """Run the episode with ``actions`` (token lists, or functions of the env giving them)."""

    async def go() -> list[StepResult]:
        await env.initial_observation()
        results = []
        for action in actions:
            results.append(await env.step(action(env) if callable(action) else action))
            if results[-1].episode_done:
                break
        return results

    return asyncio.run(go())


def c(name: str, **arguments: Any) -> ToolCall:
    return ToolCall.create(name, arguments, f"call_{name}")


def test_calculator_episode_call_then_answer() -> None:
    env = envsuite.make_env("tools/calculator", seed=3, model=TEST_MODEL)
    prompt = asyncio.run(env.initial_observation())[0].to_ints()  # type: ignore[index]
    first_reply = call_reply(env, c("calculator", expression=env.expression))  # type: ignore[attr-defined]
    env = envsuite.make_env("tools/calculator", seed=3, model=TEST_MODEL)
    results = play(env, [first_reply, lambda e: text_reply(e, str(e.value))])
    assert [r.episode_done for r in results] == [False, True]
    final = results[-1]
    assert final.stop_reason is StopReason.COMPLETED and final.reward == 1.0
    assert (
        final.metrics["success"] == 1.0
        and final.metrics["tool_calls"] == 1
        and final.metrics["tool_errors"] == 0
    )
    tool_message = env.conversation()[-2]
    assert tool_message["role"] == "tool" and tool_message["content"] == str(env.value)  # type: ignore[attr-defined]
    # The second prompt extends the first one by the call's tokens: the episode is one datum.
    assert results[0].next_observation.to_ints()[: len(prompt) + len(first_reply)] == prompt + first_reply


def test_easy_rung_shows_a_worked_call_and_pays_for_a_successful_call() -> None:
    env = envsuite.make_env("tools/calculator_easy", seed=5, model=TEST_MODEL)
    results = play(
        env, [lambda e: call_reply(e, c("calculator", expression="1 + 1")), lambda e: text_reply(e, "2")]
    )
    assert results[-1].reward == pytest.approx(0.2) and results[-1].metrics["success"] == 0.0
    roles = [m["role"] for m in env.conversation()[:5]]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    no_call = envsuite.make_env("tools/calculator_easy", seed=5, model=TEST_MODEL)
    assert play(no_call, [lambda e: text_reply(e, "2")])[-1].reward == 0.0
    # Calling until the turns run out earns nothing: the shaping pays a call followed by an answer.
    never_answers = envsuite.make_env("tools/calculator_easy", seed=5, model=TEST_MODEL)
    final = play(never_answers, [lambda e: call_reply(e, c("calculator", expression="1 + 1"))] * 4)[-1]
    assert final.stop_reason is StopReason.MAX_TURNS and final.reward == 0.0


@pytest.mark.parametrize(
    ("replies", "stop", "reward"),
    [
        ([lambda e: text_reply(e, "   ")], StopReason.PARSE_ERROR, -0.1),
        (
            [lambda e: e.ctx.renderer.tokenizer.encode("I think it is", add_special_tokens=False)],
            StopReason.MAX_TOKENS,
            -0.1,
        ),
        ([lambda e: call_reply(e, *[c("calculator", expression="1+1")] * 5)], StopReason.MAX_TOOL_CALLS, 0.0),
        ([lambda e: call_reply(e, c("calculator", expression="1+1"))] * 4, StopReason.MAX_TURNS, 0.0),
        (
            [lambda e: text_reply(e, '<tool_call>[{"name": "calculator", "arguments": {]</tool_call>')] * 4,
            StopReason.MAX_TURNS,
            0.0,
        ),
    ],
)
def test_every_way_an_episode_ends(replies: list[Any], stop: StopReason, reward: float) -> None:
    env = envsuite.make_env("tools/calculator", seed=1, model=TEST_MODEL)
    final = play(env, replies)[-1]
    assert final.episode_done and final.stop_reason is stop and final.reward == pytest.approx(reward)


def test_a_call_in_a_reply_cut_off_at_the_token_limit_still_runs() -> None:
    env = envsuite.make_env("tools/calculator", seed=2, model=TEST_MODEL)

    def cut(e: Any) -> list[int]:
        return call_reply(e, c("calculator", expression=e.expression))[:-1] + e.ctx.renderer.tokenizer.encode(
            " and", add_special_tokens=False
        )

    results = play(env, [cut])
    assert not results[0].episode_done and env.conversation()[-1]["content"] == str(env.value)  # type: ignore[attr-defined]


def test_a_prompt_past_the_budget_ends_with_context_overflow() -> None:
    env = envsuite.make_env("tools/search", seed=4, model=TEST_MODEL, max_context_tokens=420)
    final = play(env, [lambda e: call_reply(e, c("search", query="population town founded river"))])[-1]
    assert final.stop_reason is StopReason.CONTEXT_OVERFLOW


def test_search_answers_one_hop_and_multi_hop_questions() -> None:
    env = envsuite.make_env("tools/search", seed=7, model=TEST_MODEL)
    subject = env.question.subject  # type: ignore[attr-defined]
    results = play(
        env, [lambda e: call_reply(e, c("search", query=subject)), lambda e: text_reply(e, e.question.answer)]
    )
    assert subject in env.conversation()[-2]["content"] and results[-1].reward == 1.0

    hops = envsuite.make_env("tools/search_multihop", seed=7, model=TEST_MODEL)
    asyncio.run(hops.initial_observation())
    question = hops.question  # type: ignore[attr-defined]
    assert question.hops == 2
    first = search_atlas(question.subject, 1)[0]
    bridge = first.facts.get("mayor") or first.facts.get("birthplace")
    results = play(
        envsuite.make_env("tools/search_multihop", seed=7, model=TEST_MODEL),
        [
            lambda e: call_reply(e, c("search", query=question.subject)),
            lambda e: call_reply(e, c("search", query=str(bridge))),
            lambda e: text_reply(e, f"It is {question.answer}."),
        ],
    )
    assert results[-1].reward == 1.0 and results[-1].metrics["tool_calls"] == 2


@pytest.mark.parametrize(
    ("answer", "reference", "correct"),
    [
        ("It has 339430 people.", "339430", True),
        ("339,431", "339430", False),
        ("Isul Sencal", "Isul Sencal", True),
        ("isul sencal.", "Isul Sencal", True),
        ("Isul", "Isul Sencal", False),
        ("Maybe Isul Sencal or Veyar or Jorsil or anyone at all", "Isul Sencal", False),
    ],
)
def test_search_grading(answer: str, reference: str, correct: bool) -> None:
    from envsuite.envs.tool_use.retrieval import answer_matches

    assert answer_matches(answer, reference)[0] is correct


def test_kv_store_tasks_are_graded_on_the_store() -> None:
    for seed in range(40):
        env = envsuite.make_env("tools/kv_store", seed=seed, model=TEST_MODEL)
        if env.goal.task == "rename":  # type: ignore[attr-defined]
            break
    goal = env.goal  # type: ignore[attr-defined]
    old = next(k for k in goal.start if k not in goal.end)
    new = next(k for k in goal.end if k not in goal.start)
    results = play(
        env,
        [
            lambda e: call_reply(e, c("get", key=old)),
            lambda e: call_reply(e, c("set", key=new, value=goal.start[old]), c("delete", key=old)),
            lambda e: call_reply(e, c("done")),
        ],
    )
    assert results[-1].stop_reason is StopReason.TOOL_STOPPED and results[-1].reward == 1.0
    assert env.store.data == goal.end  # type: ignore[attr-defined]
    wrong = envsuite.make_env("tools/kv_store", seed=seed, model=TEST_MODEL)
    final = play(wrong, [lambda e: call_reply(e, c("delete", key=old)), lambda e: text_reply(e, "done")])[-1]
    assert final.stop_reason is StopReason.COMPLETED and final.reward == 0.0 and old in final.logs["grade"]


# ---- the families everywhere ------------------------------------------------------------------------


def test_the_catalog_has_the_tool_families() -> None:
    assert TOOL_IDS == [
        "tools/calculator-v0",
        "tools/calculator_easy-v0",
        "tools/kv_store-v0",
        "tools/kv_store_easy-v0",
        "tools/mcp_time-v0",
        "tools/mcp_time_easy-v0",
        "tools/search-v0",
        "tools/search_easy-v0",
        "tools/search_multihop-v0",
    ]


@pytest.mark.parametrize("mode", ["tokens", "text"])
def test_gymnasium_wrapper_runs_a_tool_episode(mode: str) -> None:
    env = envsuite.make("tools/calculator", mode=mode, model=TEST_MODEL)  # type: ignore[arg-type]
    gym_check_env(env, skip_render_check=True)
    if mode == "text":
        prompt, info = env.reset(seed=4)
        assert info["conversation"][0]["tools"][0]["name"] == "calculator" and "<tools>" in prompt
        inner = env.unwrapped._env  # type: ignore[attr-defined]
        call = f'<tool_call>[{{"name": "calculator", "arguments": {{"expression": "{inner.expression}"}}}}]</tool_call>'
        observation, reward, done, _, info = env.step(call)
        assert not done and str(inner.value) in observation and info["conversation"][-1]["role"] == "tool"
        _, reward, done, _, info = env.step(str(inner.value))
        assert done and reward == 1.0 and info["stop_reason"] == "completed"
    env.close()
    assert gymnasium.make(f"envsuite/{TOOL_IDS[0]}", model=TEST_MODEL) is not None


def test_the_atlas_ships_as_built_and_splits_by_subject() -> None:
    data = Path(envsuite.__file__).parent / "envs" / "tool_use" / "data" / "atlas.jsonl"
    shipped = [json.loads(line) for line in data.read_text().splitlines()]
    assert shipped == [vars(d) for d in build_atlas()]
    from envsuite.envs.tool_use.retrieval import DEMO_PERSON

    names = {d.title for d in load_atlas()} | {p for d in load_atlas() for p in d.title.split()}
    assert not {DEMO_PERSON, "Ardel", *DEMO_PERSON.split()} & names
    subjects = {
        split: {
            envsuite.make_env("tools/search", seed=s, split=split, model=TEST_MODEL).question.subject
            for s in range(30)
        }  # type: ignore[attr-defined]
        for split in ("train", "test")
    }
    assert subjects["train"] and subjects["test"] and not subjects["train"] & subjects["test"]


class ToolCallsRaiseEnv(Env):
    """Declares a tool, then raises when the model calls it: the checker's tool check must fail it."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.messages: list[Message] = [
            {"role": "system", "content": "", "tools": [tool_spec(add)]},
            {"role": "user", "content": "Add 2 and 3."},
        ]

    async def initial_observation(self) -> Any:
        return self.ctx.renderer.build_generation_prompt(
            self.messages
        ), self.ctx.renderer.get_stop_sequences()

    async def step(self, action: list[int], *, extra: Any = None) -> StepResult:
        message = self.ctx.renderer.parse_response(action).message
        if message.get("tool_calls") or message.get("unparsed_tool_calls"):
            raise ValueError("this env cannot handle tool calls")
        ob = self.ctx.renderer.build_generation_prompt(self.messages)
        return StepResult.final(0.0, StopReason.COMPLETED, ob, self.ctx.renderer.get_stop_sequences())

    def conversation(self) -> list[Message]:
        return list(self.messages)


def test_the_checker_fails_an_env_that_raises_on_tool_calls() -> None:
    from envsuite.testing import CheckOutcome, check_env

    envsuite.register("scratch/tool-calls-raise-v0", ToolCallsRaiseEnv, reward_range=(0.0, 1.0))
    try:
        report = check_env("scratch/tool-calls-raise", model=TEST_MODEL)
    finally:
        envsuite.registry.unregister("scratch/tool-calls-raise-v0")
    result = next(r for r in report.results if r.name == "tool calls are answered")
    assert result.outcome is CheckOutcome.FAILED and "cannot handle tool calls" in result.detail
