"""ChatML (``<|im_start|>role\\n...<|im_end|>``), as used by SmolLM2 and Qwen2.5.

The newline that follows each ``<|im_end|>`` is rendered at the start of the *next* turn's header, so
an assistant turn ends exactly at its end-of-turn token: a sampled reply (content + ``<|im_end|>``) is
then the whole turn and every later prompt extends the earlier one token for token.

Tools, two formats:

* ``chatml`` (and ``qwen3``): the Hermes/Qwen format that tool-taking ChatML templates (Qwen2.5, Qwen3)
  write: the definitions in a ``# Tools`` block of the system message, one JSON object per call in a
  ``<tool_call>`` block, results as ``<tool_response>`` blocks in a ``user`` turn (consecutive results
  share one turn).
* ``chatml-smollm2``: SmolLM2's. Its shipped template renders every message as its role and content and
  ignores ``tools``, so the definitions are system-message text (``<tools>`` JSON, as SmolLM2's model
  card prompts), the calls a JSON list in one ``<tool_call>[...]</tool_call>`` block of the reply, and a
  result a ``tool`` turn, exactly as that template writes a ``tool`` message.
"""

from __future__ import annotations

from envsuite.chat import (
    Message,
    Role,
    ToolCall,
    ToolSpec,
    UnparsedToolCall,
    canonical_json,
    tool_calls_of,
)
from envsuite.renderers._common import Marker, Segment, SegmentRenderer
from envsuite.renderers._tool_grammar import CallSyntax
from envsuite.renderers._tool_text import ToolSplit, decode_json, read_call, split_tagged, tool_json, tools_of

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"

HERMES_TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
"""The Qwen2.5/Qwen3 templates' tool block, up to the definitions (one JSON object per line follows)."""


def hermes_tools_outro() -> tuple[str, ...]:
    """The block after the definitions: how to call, with the call markers as :class:`Marker` parts."""
    call, close = Marker(TOOL_CALL_OPEN), Marker(TOOL_CALL_CLOSE)
    return (
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within ",
        call,
        close,
        " XML tags:\n",
        call,
        '\n{"name": <function-name>, "arguments": <args-json-object>}\n',
        close,
    )


SMOLLM2_TOOLS_PROMPT = (
    "You can call functions to answer. The available functions, as JSON:\n<tools>{tools}</tools>\n"
    "To call functions, reply with only a JSON list of calls inside <tool_call></tool_call> tags, e.g.\n"
    '<tool_call>[{{"name": "func_name", "arguments": {{"arg": "value"}}}}]</tool_call>\n'
    "Each result comes back in a tool message."
)
"""``chatml-smollm2``'s system text with tools (envsuite's wording, SmolLM2 model card's markup:
``<tools>`` with a JSON list of definitions, calls as a JSON list in ``<tool_call>``)."""


def call_json(call: ToolCall) -> str:
    """``{"name": ..., "arguments": ...}`` with the arguments as the call holds them (JSON text)."""
    return (
        '{"name": ' + canonical_json(call.function.name) + ', "arguments": ' + call.function.arguments + "}"
    )


def split_tagged_calls(text: str) -> ToolSplit:
    """``<tool_call>`` blocks holding a JSON object or a list of them; the text before is the content."""
    tagged = split_tagged(text, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    if tagged is None:
        return ToolSplit(text)
    before, blocks = tagged
    split = ToolSplit(before.removesuffix("\n"))
    for raw, inner in blocks:
        value, error = decode_json(inner.strip())
        if error is not None:
            split.add(UnparsedToolCall.create(raw, error))
            continue
        for item in value if isinstance(value, list) else [value]:
            split.add(read_call(item, raw, len(split.calls) + len(split.unparsed)))
    return split


class ChatMLRenderer(SegmentRenderer):
    """Plain ChatML: no default system message, no begin-of-text marker; Hermes/Qwen tool format."""

    name = "chatml"
    has_extension_property = True
    end_of_turn = IM_END

    def _turn_header(self, messages: list[Message], role: Role, preceded: bool) -> list[int]:
        newline = self.codec.literal("\n") if preceded else []
        return newline + self.codec.marker(IM_START) + self.codec.literal(f"{role}\n")

    def _render_message(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        message = messages[index]
        if message["role"] == "tool":
            return self._render_tool_result(messages, index, preceded)
        header = Segment(self._turn_header(messages, message["role"], preceded), index)
        if index == 0 and message["role"] == "system" and message.get("tools"):
            body = self._system_with_tools(message["content"], tools_of(messages))
        else:
            body = self._body_tokens(messages, index)
        body += self.codec.marker(IM_END)
        return [header, Segment(body, index, trainable=message["role"] == "assistant")]

    def _body_tokens(self, messages: list[Message], index: int) -> list[int]:
        message = messages[index]
        return self._content_with_calls(message["content"], tool_calls_of(message))

    # ---- tools: the Hermes/Qwen format (chatml-smollm2 overrides) -----------------------------------

    def _content_with_calls(self, content: str, calls: list[ToolCall]) -> list[int]:
        if not calls:
            return self.codec.text(content)
        parts: list[str] = [content]
        for i, call in enumerate(calls):
            if i or content:
                parts.append("\n")
            parts += [Marker(TOOL_CALL_OPEN), "\n" + call_json(call) + "\n", Marker(TOOL_CALL_CLOSE)]
        return self.codec.parts(*parts)

    def _system_with_tools(self, content: str, tools: list[ToolSpec]) -> list[int]:
        definitions = "".join("\n" + canonical_json(tool_json(spec)) for spec in tools)
        lead = (content + "\n\n" if content else "") + HERMES_TOOLS_INTRO + definitions
        return self.codec.parts(lead, *hermes_tools_outro())

    def _render_tool_result(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        """Consecutive ``tool`` messages share one ``user`` turn of ``<tool_response>`` blocks."""
        opens = index == 0 or messages[index - 1]["role"] != "tool"
        closes = index == len(messages) - 1 or messages[index + 1]["role"] != "tool"
        newline = self.codec.literal("\n") if preceded else []
        header = newline + self.codec.marker(IM_START) + self.codec.literal("user") if opens else []
        body = self.codec.parts(
            "\n",
            Marker(TOOL_RESPONSE_OPEN),
            "\n" + messages[index]["content"] + "\n",
            Marker(TOOL_RESPONSE_CLOSE),
        )
        return [Segment(header + body + (self.codec.marker(IM_END) if closes else []), index)]

    def _split_tool_calls(self, text: str) -> ToolSplit:
        return split_tagged_calls(text)

    def tool_call_syntax(self) -> CallSyntax:
        # content, then each call in a block of its own: <tool_call>\n{...}\n</tool_call>, blocks on lines
        return CallSyntax(
            opener=f"{TOOL_CALL_OPEN}\n",
            separator=f"\n{TOOL_CALL_CLOSE}\n{TOOL_CALL_OPEN}\n",
            closer=f"\n{TOOL_CALL_CLOSE}",
            trigger=TOOL_CALL_OPEN,
            specials=self._specials(TOOL_CALL_OPEN, TOOL_CALL_CLOSE),
        )


class SmolLM2ChatMLRenderer(ChatMLRenderer):
    """ChatML with SmolLM2's default system message, inserted when the conversation opens without one.

    This reproduces SmolLM2's shipped chat template token for token (except that the template's final
    newline after a conversation's last ``<|im_end|>`` belongs to no turn and is not rendered). With
    tools, the definitions take the default system message's place (see the module docstring).
    """

    name = "chatml-smollm2"

    def _prefix(self, messages: list[Message]) -> list[Segment]:
        if not messages or messages[0]["role"] == "system":
            return []
        system = self.codec.marker(IM_START) + self.codec.literal("system\n")
        system += self.codec.literal(SMOLLM2_DEFAULT_SYSTEM) + self.codec.marker(IM_END)
        return [Segment(system, None)]

    def _render_message(self, messages: list[Message], index: int, preceded: bool) -> list[Segment]:
        if messages[index]["role"] != "tool":
            return super()._render_message(messages, index, preceded)
        header = Segment(self._turn_header(messages, "tool", preceded), index)
        return [header, Segment(self._body_tokens(messages, index) + self.codec.marker(IM_END), index)]

    def _content_with_calls(self, content: str, calls: list[ToolCall]) -> list[int]:
        if not calls:
            return self.codec.text(content)
        listed = "[" + ", ".join(call_json(call) for call in calls) + "]"
        return self.codec.parts(
            content + ("\n" if content else ""), Marker(TOOL_CALL_OPEN), listed, Marker(TOOL_CALL_CLOSE)
        )

    def tool_call_syntax(self) -> CallSyntax:
        # every call of the reply in one block, as a JSON list: <tool_call>[{...}, {...}]</tool_call>
        return CallSyntax(
            opener=f"{TOOL_CALL_OPEN}[",
            separator=", ",
            closer=f"]{TOOL_CALL_CLOSE}",
            trigger=TOOL_CALL_OPEN,
            specials=self._specials(TOOL_CALL_OPEN, TOOL_CALL_CLOSE),
        )

    def _system_with_tools(self, content: str, tools: list[ToolSpec]) -> list[int]:
        listed = canonical_json([tool_json(spec) for spec in tools])
        text = (content + "\n\n" if content else "") + SMOLLM2_TOOLS_PROMPT.format(tools=listed)
        return self.codec.text(text)
