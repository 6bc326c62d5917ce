"""Structured outputs on ``envsuite serve``'s OpenAI routes, through real clients against the server on
127.0.0.1 and the random-weight ``tiny-random`` model (whose free replies are never valid JSON or calls,
so every valid document here is the constraint's doing):

* ``response_format`` ``json_schema`` and ``json_object``: every choice is a document valid against the
  schema (``jsonschema``), streamed or not;
* ``tool_choice`` ``"required"`` and a named function, ``strict`` tools, ``parallel_tool_calls``: every
  choice is calls of offered functions, arguments valid against their schemas, in SmolLM2's tool format;
* vLLM's ``structured_outputs`` on ``/completions`` (choice, regex);
* the OpenAI Agents SDK's ``Runner`` with a strict ``@function_tool`` runs to completion (the tool runs and
  its result goes back to the model), LangChain's ``with_structured_output(method="json_schema")`` returns
  a valid object.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pydantic
import pytest
from tinker.proto.response_conv import deserialize_sample_response

from envsuite.constraints import Constraint
from envsuite.models import get_tokenizer
from envsuite.serve import ServeConfig
from tests.conftest import TEST_MODEL
from tests.test_serve import running

KEY = "tml-structured-test"
MESSAGES = [{"role": "user", "content": "Describe a person."}]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "role": {"type": "string", "enum": ["admin", "user", "guest"]},
    },
    "required": ["name", "age", "role"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two small integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 99},
                "b": {"type": "integer", "minimum": 0, "maximum": 99},
            },
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, ADD)}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running(ServeConfig(state_dir=tmp_path_factory.mktemp("state")), api_key=KEY) as served:
        yield served


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)


def _calls_valid(message: Any, allowed: set[str]) -> int:
    """How many calls ``message`` makes, each checked: an offered function, arguments valid."""
    calls = message.tool_calls or []
    for call in calls:
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return len(calls)


def test_response_format_json_schema_gives_valid_documents(url: str) -> None:
    reply = _client(url).chat.completions.create(
        model=TEST_MODEL,
        messages=MESSAGES,
        n=8,
        seed=3,
        max_tokens=120,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        },
    )
    for choice in reply.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content or ""), PERSON)
    free = _client(url).chat.completions.create(
        model=TEST_MODEL, messages=MESSAGES, n=4, seed=3, max_tokens=40
    )
    with pytest.raises(ValueError):  # the same model, unconstrained, writes no JSON at all
        [json.loads(c.message.content or "") for c in free.choices]


def test_json_object_and_streaming(url: str) -> None:
    stream = _client(url).chat.completions.create(
        model=TEST_MODEL,
        messages=MESSAGES,
        seed=5,
        max_tokens=200,
        stream=True,
        response_format={"type": "json_object"},
    )
    parts, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    if finish == "stop":
        assert isinstance(json.loads("".join(parts)), dict)
    else:  # cut by max_tokens: a prefix of an object, and said so
        assert finish == "length" and "".join(parts).startswith("{")


@pytest.mark.parametrize("parallel", [True, False])
def test_required_tool_choice_always_calls(url: str, parallel: bool) -> None:
    reply = _client(url).chat.completions.create(
        model=TEST_MODEL,
        messages=[{"role": "user", "content": "Weather in Paris, and 2+3?"}],
        tools=[WEATHER, ADD],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=parallel,
        n=6,
        seed=1,
        max_tokens=160,
    )
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls"
        made = _calls_valid(choice.message, {"get_weather", "add"})
        assert made >= 1 and (parallel or made == 1)


def test_a_named_function_is_the_one_call(url: str) -> None:
    stream = _client(url).chat.completions.create(
        model=TEST_MODEL,
        messages=[{"role": "user", "content": "Add 2 and 3."}],
        tools=[WEATHER, ADD],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "add"}},
        seed=2,
        max_tokens=60,
        stream=True,
    )
    calls = [c for chunk in stream for choice in chunk.choices for c in choice.delta.tool_calls or []]
    assert [c.function.name for c in calls] == ["add"]  # type: ignore[union-attr]
    jsonschema.validate(json.loads(calls[0].function.arguments or ""), SCHEMAS["add"])  # type: ignore[union-attr]


def test_strict_tools_under_auto_leave_text_free(url: str) -> None:
    """With ``auto`` the model may write text (the random model does): a strict tool only shapes a call."""
    reply = _client(url).chat.completions.create(
        model=TEST_MODEL,
        messages=[{"role": "user", "content": "Hello!"}],
        tools=[WEATHER],  # type: ignore[list-item]
        n=4,
        seed=4,
        max_tokens=24,
    )
    for choice in reply.choices:
        assert _calls_valid(choice.message, {"get_weather"}) == 0
        assert choice.message.content and "<tool_call>" not in choice.message.content


def test_structured_outputs_on_completions(url: str) -> None:
    client = _client(url)
    choice = client.completions.create(
        model=TEST_MODEL,
        prompt="The answer is",
        n=6,
        seed=0,
        max_tokens=10,
        extra_body={"structured_outputs": {"choice": ["yes", "no", "maybe"]}},
    )
    assert {c.text for c in choice.choices} <= {"yes", "no", "maybe"}
    pattern = r"[0-9]{3}-[a-z]{2}"
    regex = client.completions.create(
        model=TEST_MODEL,
        prompt="Code:",
        n=4,
        seed=0,
        max_tokens=12,
        extra_body={"structured_outputs": {"regex": pattern}},
    )
    assert all(re.fullmatch(pattern, c.text) for c in regex.choices)


def test_the_agents_sdk_runs_a_strict_function_tool_to_completion(url: str) -> None:
    agents = pytest.importorskip("agents")
    called: list[str] = []

    @agents.function_tool  # strict by default: the SDK sends tools[].function.strict = true
    def city_population(city: Literal["Paris", "Rome"]) -> str:
        """The population of a city."""
        called.append(city)
        return "about two million"

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    agent = agents.Agent(
        name="assistant",
        instructions="Answer with the tool.",
        tools=[city_population],
        model=agents.OpenAIChatCompletionsModel(model=TEST_MODEL, openai_client=client),
        # The first turn must call (a random model would not choose to); the SDK then resets the
        # choice to auto, and the model's free reply ends the run.
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=160, temperature=1.0),
    )
    result = asyncio.run(agents.Runner.run(agent, "How many people live in Paris?", max_turns=4))
    assert called and set(called) <= {"Paris", "Rome"}
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert [o.output for o in outputs] == ["about two million"] * len(called)
    assert isinstance(result.final_output, str)


class Verdict(pydantic.BaseModel):
    answer: Literal["yes", "no"]
    confident: bool


def test_langchain_structured_output_returns_a_valid_object(url: str) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(
        model=TEST_MODEL, base_url=f"{url}/v1", api_key=KEY, max_tokens=64, temperature=1.0, max_retries=0
    )
    verdict = llm.with_structured_output(Verdict, method="json_schema").invoke("Is the sky blue?")
    assert isinstance(verdict, Verdict)


def test_bad_schemas_and_conflicts_are_400s_naming_the_parameter(url: str, tmp_path: Path) -> None:
    client = _client(url)
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}},
            "response_format.json_schema.name",
        ),
        ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "sub"}}}, "tool_choice"),
        (
            {
                "response_format": {"type": "json_object"},
                "extra_body": {"structured_outputs": {"regex": "a"}},
            },
            "structured_outputs",
        ),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=TEST_MODEL, messages=MESSAGES, max_tokens=4, **extra)
        assert caught.value.body["param"] == param  # type: ignore[index]


def test_the_tinker_sample_route_takes_a_constraint(url: str) -> None:
    """``sampling_params.constraint`` (envsuite's extension) on ``/api/v1/asample``: every sample is one
    of the choices; a malformed one is a 400 naming it."""
    headers = {"Authorization": f"Bearer {KEY}"}
    constraint = Constraint.choice(["yes", "no"]).to_dict()
    body = {
        "base_model": TEST_MODEL,
        "num_samples": 6,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 28, 4003]}]},
        "sampling_params": {"max_tokens": 8, "seed": 0, "constraint": constraint},
    }
    started = httpx.post(f"{url}/api/v1/asample", json=body, headers=headers, timeout=60)
    assert started.status_code == 200, started.text
    request_id = started.json()["request_id"]
    result = httpx.post(
        f"{url}/api/v1/retrieve_future", json={"request_id": request_id}, headers=headers, timeout=120
    )
    assert result.status_code == 200, result.text
    tokenizer = get_tokenizer(TEST_MODEL)
    sequences = deserialize_sample_response(result.content).sequences  # the SDK's own reader
    texts = {tokenizer.decode(seq.tokens, skip_special_tokens=True) for seq in sequences}
    assert texts <= {"yes", "no"} and texts
    body["sampling_params"]["constraint"] = {"kind": "regex"}  # type: ignore[index]
    refused = httpx.post(f"{url}/api/v1/asample", json=body, headers=headers, timeout=60)
    assert refused.status_code == 400 and "sampling_params.constraint" in refused.text
