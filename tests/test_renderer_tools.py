"""Tool calling in every renderer: the families' chat templates token for token, parsing, extension.

SmolLM2's own template (the real tokenizer) and the Qwen3 and Llama 3.2 templates (on stand-ins of
those tokenizers, tests/support/family_tokenizers.py) are the references.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from envsuite.core import Message, TokensWithLogprobs, ToolCall, ToolSpec, Trajectory, Transition
from envsuite.models import get_tokenizer
from envsuite.renderers import (
    ParseOutcome,
    Renderer,
    TrainOnWhat,
    get_renderer,
    list_renderers,
    reply_message_tokens,
)
from envsuite.trainers import merge_turns
from tests.support.family_tokenizers import family_tokenizer

ADD: ToolSpec = {
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
LOOKUP: ToolSpec = {
    "name": "lookup",
    "description": "Find a city's population (ünïcode kept).",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOLS = [ADD, LOOKUP]
SYSTEM: Message = {"role": "system", "content": "Answer with a number."}
ASK: Message = {"role": "user", "content": "What is 2 + 3, and how many live in Oslo?"}


def call(name: str, arguments: dict[str, Any], call_id: str) -> ToolCall:
    return ToolCall.create(name, arguments, call_id)


def assistant(content: str, *calls: ToolCall) -> Message:
    message: Message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def result(content: str, call_id: str, name: str) -> Message:
    return {"role": "tool", "content": content, "tool_call_id": call_id, "name": name}


ADD_CALL = call("add", {"a": 2, "b": 3}, "c1")
OSLO_CALL = call("lookup", {"city": "Oslo"}, "c2")
TRONDHEIM_CALL = call("lookup", {"city": "Trondheim"}, "c3")
HISTORIES: dict[str, list[Message]] = {
    "tools_only": [ASK],
    "system": [SYSTEM, ASK],
    "one_call": [SYSTEM, ASK, assistant("", ADD_CALL), result("5", "c1", "add")],
    "two_calls_one_turn": [
        ASK,
        assistant("Let me look.", ADD_CALL, OSLO_CALL),
        result("5", "c1", "add"),
        result("709037", "c2", "lookup"),
    ],
    "several_turns": [
        SYSTEM,
        ASK,
        assistant("", ADD_CALL),
        result("5", "c1", "add"),
        assistant("", OSLO_CALL),
        result("709037", "c2", "lookup"),
        assistant("5 and 709037."),
        {"role": "user", "content": "And Trondheim?"},
        assistant("", TRONDHEIM_CALL),
        result("212660", "c3", "lookup"),
    ],
}


def template_ids(tokenizer: Any, messages: list[Any], **kwargs: Any) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, **kwargs)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def openai_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": dict(spec)} for spec in TOOLS]


# ---- the families' own chat templates, token for token ---------------------------------------


@pytest.mark.parametrize("history", HISTORIES.values(), ids=HISTORIES.keys())
@pytest.mark.parametrize("name", ["qwen3", "chatml"])
def test_hermes_format_matches_qwen3s_template(name: str, history: list[Message]) -> None:
    tokenizer = family_tokenizer("qwen3")
    renderer = get_renderer(name, tokenizer)
    expected = template_ids(tokenizer, history, tools=openai_tools())
    assert renderer.build_generation_prompt(history, tools=TOOLS).to_ints() == expected
    # The call markers are the family's special tokens, not text.
    assert tokenizer.convert_tokens_to_ids("<tool_call>") in expected


def llama_view(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation as Llama's template takes it: a call's arguments as an object, one per message."""
    view: list[dict[str, Any]] = []
    for message in messages:
        if message.get("tool_calls"):
            for c in message["tool_calls"]:
                function = {"name": c.function.name, "arguments": json.loads(c.function.arguments)}
                view.append({"role": "assistant", "content": "", "tool_calls": [{"function": function}]})
        else:
            view.append(dict(message))
    return view


LLAMA_HISTORIES = {k: v for k, v in HISTORIES.items() if k != "two_calls_one_turn"}


@pytest.mark.parametrize("history", LLAMA_HISTORIES.values(), ids=LLAMA_HISTORIES.keys())
def test_llama3_format_matches_llama_3_2s_template(history: list[Message]) -> None:
    tokenizer = family_tokenizer("llama3")
    renderer = get_renderer("llama3", tokenizer)
    expected = template_ids(tokenizer, llama_view(history), tools=openai_tools(), date_string="26 Jul 2024")
    assert renderer.build_generation_prompt(history, tools=TOOLS).to_ints() == expected


def smollm2_view(renderer: Renderer, messages: list[Message]) -> list[dict[str, Any]]:
    """What SmolLM2's template is given: the tool prompt as the system text, calls as reply text."""
    system_tokens = renderer.build_generation_prompt([], tools=TOOLS).to_ints()
    tok = renderer.tokenizer
    system_text = tok.decode(system_tokens).removeprefix("<|im_start|>system\n")
    system_text = system_text.removesuffix("<|im_end|>\n<|im_start|>assistant\n")
    body = (messages[0]["content"] + "\n\n" if messages[0]["role"] == "system" else "") + system_text
    view: list[dict[str, Any]] = [{"role": "system", "content": body}]
    for message in messages[1:] if messages[0]["role"] == "system" else messages:
        text = message["content"]
        if message.get("tool_calls"):
            calls = ", ".join(
                json.dumps({"name": c.function.name, "arguments": json.loads(c.function.arguments)})
                for c in message["tool_calls"]
            )
            text = (text + "\n" if text else "") + f"<tool_call>[{calls}]</tool_call>"
        view.append({"role": message["role"], "content": text})
    return view


@pytest.mark.parametrize("history", HISTORIES.values(), ids=HISTORIES.keys())
def test_smollm2_format_matches_its_shipped_template(history: list[Message]) -> None:
    tokenizer = get_tokenizer("tiny-random")  # SmolLM2's tokenizer and chat template
    renderer = get_renderer("chatml-smollm2", tokenizer)
    expected = template_ids(tokenizer, smollm2_view(renderer, history), tools=openai_tools())
    assert renderer.build_generation_prompt(history, tools=TOOLS).to_ints() == expected


def test_smollm2_tool_prompt_lists_the_tools_and_the_call_syntax() -> None:
    tokenizer = get_tokenizer("tiny-random")
    renderer = get_renderer("chatml-smollm2", tokenizer)
    text = tokenizer.decode(renderer.build_generation_prompt([ASK], tools=TOOLS).to_ints())
    assert f"<tools>{json.dumps(openai_tools(), ensure_ascii=False)}</tools>" in text
    assert '<tool_call>[{"name": "func_name", "arguments": {"arg": "value"}}]</tool_call>' in text
    assert "You are a helpful AI assistant named SmolLM" not in text  # the tools replace the default


# ---- tools in the conversation, and errors ----------------------------------------------------


@pytest.mark.parametrize("name", list_renderers())
def test_tools_kwarg_equals_the_cookbook_prefix(name: str) -> None:
    renderer = get_renderer(name, get_tokenizer("tiny-random"))
    prefix = renderer.create_conversation_prefix_with_tools(TOOLS, SYSTEM["content"])
    with_kwarg = renderer.build_generation_prompt([SYSTEM, ASK], tools=TOOLS).to_ints()
    assert renderer.build_generation_prompt([*prefix, ASK]).to_ints() == with_kwarg
    assert renderer.build_generation_prompt([SYSTEM, ASK]).to_ints() != with_kwarg


def test_bad_tool_specs_and_calls_get_clear_errors() -> None:
    renderer = get_renderer("chatml", get_tokenizer("tiny-random"))
    with pytest.raises(ValueError, match="tool 0 has name 'two words'"):
        renderer.build_generation_prompt([ASK], tools=[{**ADD, "name": "two words"}])
    with pytest.raises(TypeError, match="JSON-schema parameters"):
        renderer.build_generation_prompt([ASK], tools=[{"name": "x", "description": ""}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="only a first system message"):
        renderer.build_generation_prompt([ASK, {"role": "system", "content": "", "tools": TOOLS}])
    with pytest.raises(TypeError, match="needs a function name"):
        renderer.build_generation_prompt(
            [ASK, {"role": "assistant", "content": "", "tool_calls": [{"x": 1}]}]
        )  # type: ignore[list-item]


# ---- parsing ----------------------------------------------------------------------------------

CALL_TEXT = {
    "chatml": '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
    "qwen3": '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
    "chatml-smollm2": '<tool_call>[{"name": "add", "arguments": {"a": 2, "b": 3}}]</tool_call>',
    "llama3": '{"name": "add", "parameters": {"a": 2, "b": 3}}',
    "role_colon": 'Tool call: {"name": "add", "arguments": {"a": 2, "b": 3}}',
}
STOP_TEXT = {"llama3": "<|eot_id|>", "role_colon": "\n\nUser:"}


def sampled(tokenizer: Any, name: str, text: str) -> list[int]:
    """Tokens a model emits for ``text`` and a clean stop (the reply's text is one piece)."""
    lead = " " if name == "role_colon" else ""
    tokens = list(tokenizer.encode(lead + text, add_special_tokens=False))
    if name == "role_colon":
        return (
            tokens
            + tokenizer.encode("\n\n", add_special_tokens=False)
            + tokenizer.encode("User:", add_special_tokens=False)
        )
    if name in STOP_TEXT:
        return tokens + tokenizer.encode(STOP_TEXT[name], add_special_tokens=False)
    return [*tokens, 2]


@pytest.mark.parametrize("name", list_renderers())
def test_a_call_parses_into_openai_shape_and_renders_back_to_the_sampled_tokens(name: str) -> None:
    tokenizer = get_tokenizer("tiny-random")
    renderer = get_renderer(name, tokenizer)
    prompt = renderer.build_generation_prompt([SYSTEM, ASK], tools=TOOLS).to_ints()
    reply = sampled(tokenizer, name, CALL_TEXT[name])
    parsed = renderer.parse_response(reply)
    assert parsed.outcome is ParseOutcome.STOP and parsed.valid_utf8
    message = parsed.message
    assert message["content"] == "" and "unparsed_tool_calls" not in message
    (got,) = message["tool_calls"]
    assert got.function.name == "add" and json.loads(got.function.arguments) == {"a": 2, "b": 3}
    assert got["type"] == "function" and got.id and got.id.startswith("call_")
    assert renderer.parse_response(reply).message["tool_calls"][0].id == got.id  # ids are deterministic
    example = renderer.build_supervised_example([SYSTEM, ASK, message], tools=TOOLS)
    assert example.model_input.to_ints() == prompt + reply
    assert example.weights_T == [0.0] * len(prompt) + [1.0] * len(reply)
    assert reply_message_tokens(renderer, message) == reply


@pytest.mark.parametrize("name", list_renderers())
def test_content_and_several_calls_round_trip(name: str) -> None:
    renderer = get_renderer(name, get_tokenizer("tiny-random"))
    message = assistant("Let me check.", ADD_CALL, OSLO_CALL)
    parsed = renderer.parse_response(reply_message_tokens(renderer, message)).message
    assert parsed["content"] == "Let me check."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in parsed["tool_calls"]] == [
        ("add", {"a": 2, "b": 3}),
        ("lookup", {"city": "Oslo"}),
    ]


MALFORMED = {
    "chatml": [
        ('<tool_call>\n{"name": "add", "arguments": {"a": 2,}}\n</tool_call>', "invalid JSON"),
        ('<tool_call>\n{"arguments": {}}\n</tool_call>', '"name"'),
        ('<tool_call>\n{"name": "add", "arguments": [1, 2]}\n</tool_call>', "must be a JSON object"),
        ('<tool_call>\n{"name": "add", "argu', "invalid JSON"),
    ],
    "chatml-smollm2": [
        ('<tool_call>[{"name": "add", "arguments": {"a": 2}]</tool_call>', "invalid JSON"),
        ('<tool_call>["add"]</tool_call>', "must be a JSON object"),
    ],
    "llama3": [('<|python_tag|>{"name": "add", "parameters": {"a": ', "invalid JSON")],
    "role_colon": [('Tool call: {"name": add}', "invalid JSON")],
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_calls_are_reported_not_raised(name: str) -> None:
    tokenizer = get_tokenizer("tiny-random")
    renderer = get_renderer(name, tokenizer)
    for text, why in MALFORMED[name]:
        message = renderer.parse_response(sampled(tokenizer, name, text)).message
        assert "tool_calls" not in message, text
        (unparsed,) = message["unparsed_tool_calls"]
        assert why in unparsed.error and unparsed.raw_text, (text, unparsed)


def test_text_that_merely_looks_like_json_is_content_for_llama3() -> None:
    tokenizer = get_tokenizer("tiny-random")
    renderer = get_renderer("llama3", tokenizer)
    message = renderer.parse_response(sampled(tokenizer, "llama3", '{4} and {"x": 1}')).message
    assert message == {"role": "assistant", "content": '{4} and {"x": 1}'}


@pytest.mark.parametrize("name", list_renderers())
def test_garbage_never_raises(name: str) -> None:
    tokenizer = get_tokenizer("tiny-random")
    renderer = get_renderer(name, tokenizer)
    for text in [
        "<tool_call>" * 50,
        "<tool_call>\n" + "[" * 5000,
        "Tool call: " + "{" * 3000,
        '{"name": ' * 900,
    ]:
        parsed = renderer.parse_response(sampled(tokenizer, name, text))
        assert isinstance(parsed.message["content"], str)


# ---- multi-turn: the extension property across tool turns ------------------------------------


@pytest.mark.parametrize("name", ["chatml", "chatml-smollm2", "llama3", "role_colon"])
def test_merged_tool_episode_equals_the_rerendered_conversation(name: str) -> None:
    """Three turns (call, two calls, answer) with their results, as an env builds its prompts: the
    trainer's merged datum is exactly the whole conversation re-rendered, weights included."""
    tokenizer = get_tokenizer("tiny-random")
    renderer = get_renderer(name, tokenizer)
    assert renderer.has_extension_property
    conversation: list[Message] = [SYSTEM, ASK]
    prompt = renderer.build_generation_prompt(conversation, tools=TOOLS)
    turns = [
        (assistant("", ADD_CALL), [result("5", "c1", "add")]),
        (
            assistant("Next.", OSLO_CALL, TRONDHEIM_CALL),
            [result("709037", "c2", "lookup"), result("212660", "c3", "lookup")],
        ),
        (assistant("5, 709037 and 212660."), []),
    ]
    transitions: list[Transition] = []
    for reply_message, results in turns:
        reply = reply_message_tokens(renderer, reply_message)
        transitions.append(Transition(prompt, TokensWithLogprobs(reply, [0.0] * len(reply)), 0.0, False))
        conversation = [*conversation, renderer.parse_response(reply).message, *results]
        if results:
            prompt = renderer.build_next_prompt(prompt, reply, conversation, tools=TOOLS)
            assert prompt.to_ints() == renderer.build_generation_prompt(conversation, tools=TOOLS).to_ints()
    (merged,) = merge_turns(Trajectory(transitions, prompt))
    whole = renderer.build_supervised_example(conversation, TrainOnWhat.ALL_ASSISTANT_MESSAGES, tools=TOOLS)
    assert merged.tokens_T == whole.model_input.to_ints()
    assert [float(a) for a in merged.is_action_T] == whole.weights_T
