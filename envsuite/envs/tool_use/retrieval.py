"""``tools/search``: questions about a fictional world, answerable only through a ``search`` tool.

The world is the atlas shipped with envsuite (:mod:`~envsuite.envs.tool_use._atlas`: 200 towns and 400
people, every fact invented). ``search(query)`` ranks its documents with BM25 (``bm25s``, built once per
process, about 20 ms) and returns the best few. Each seed draws one question: by default one look-up
(a town's population, founding year or mayor, a person's birthplace or birth year); the
``tools/search_multihop`` rung chains two (the birth year of a town's mayor). The split is by the
entity asked about, so held-out questions are about towns and people never asked about in training.

Grading: a numeric answer must equal the reference (the last number of the reply); a name must appear
in a short reply (at most :data:`MAX_ANSWER_WORDS` words), whole words, ignoring case.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from envsuite.core import EnvContext, Message, Tool, ToolCall, ToolFailure, tool
from envsuite.envs._problem import JUNK_ANSWER, draw_for_split
from envsuite.envs.tool_use._atlas import QUESTION_KINDS, SINGLE_HOP, Document, draw_question, load_atlas
from envsuite.envs.tool_use._env import DEFAULT_FORMAT_COEF, Score, ToolUseEnv
from envsuite.grading import extract_final_answer, parse_number

if TYPE_CHECKING:
    import bm25s

TASK = "{question} Use the search tool, then reply with the answer only."
MAX_ANSWER_WORDS = 8
MAX_QUERY_CHARS = 200
DEMO_PERSON = "Orla Venn"
"""The demonstration's subject (born in Ardel): not in the atlas (a test checks)."""


@functools.cache
def _index() -> tuple[bm25s.BM25, tuple[Document, ...]]:
    import bm25s

    documents = load_atlas()
    retriever = bm25s.BM25()
    corpus = [f"{d.title}. {d.text}" for d in documents]
    retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
    return retriever, documents


def search_atlas(query: str, top_k: int) -> list[Document]:
    """The ``top_k`` documents BM25 ranks highest for ``query`` (those with any matching word)."""
    import bm25s

    retriever, documents = _index()
    tokens = bm25s.tokenize([query[:MAX_QUERY_CHARS]], stopwords="en", show_progress=False)
    if not tokens.vocab:  # nothing left after stop words: no document can match
        return []
    results, scores = retriever.retrieve(tokens, k=min(top_k, len(documents)), show_progress=False)
    return [documents[int(i)] for i, s in zip(results[0], scores[0], strict=True) if s > 0]


@functools.cache
def make_search_tool(top_k: int) -> Tool:
    """A ``search`` tool over the atlas returning ``top_k`` documents (one per ``top_k``; it holds no state)."""

    @tool
    def search(query: Annotated[str, "What to look for, e.g. a town's or a person's name"]) -> str:
        """Search the atlas of towns and people; returns the best matching entries."""
        if not query.strip():
            raise ToolFailure("empty query")
        found = search_atlas(query, top_k)
        if not found:
            return "No results."
        return "\n".join(f"[{i + 1}] {d.text}" for i, d in enumerate(found))

    return search


def answer_matches(answer: str, reference: str) -> tuple[bool, str]:
    """Whether ``answer`` gives ``reference`` (see the module docstring), and what was read."""
    expected = parse_number(reference)
    if expected is not None:
        extracted = extract_final_answer(answer)
        got = parse_number(extracted.text) if extracted is not None else None
        return got == expected, f"read {got}"
    words = re.findall(r"[\w']+", answer.lower())
    if len(words) > MAX_ANSWER_WORDS:
        return False, f"answer longer than {MAX_ANSWER_WORDS} words"
    wanted = re.findall(r"[\w']+", reference.lower())
    found = any(words[i : i + len(wanted)] == wanted for i in range(len(words)))
    return found, "named" if found else "not named"


class SearchEnv(ToolUseEnv):
    """Answer one question about the atlas, with a search tool (see the module docstring)."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        kinds: Sequence[str] = SINGLE_HOP,
        top_k: int = 3,
        task: str = TASK,
        max_turns: int = 4,
        max_tool_calls: int = 4,
        system_prompt: str | None = None,
        demonstrate: bool = False,
        tool_use_reward: float = 0.0,
        format_coef: float = DEFAULT_FORMAT_COEF,
    ) -> None:
        """``kinds``: question kinds to draw from (``population``, ``founded``, ``mayor``, ``birthplace``,
        ``born``; two hops: ``mayor_born``, ``birthplace_population``, ``birthplace_river``); ``top_k``:
        documents per search; ``task``: the user's message, a template of ``{question}``."""
        super().__init__(
            ctx,
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            system_prompt=system_prompt,
            demonstrate=demonstrate,
            tool_use_reward=tool_use_reward,
            format_coef=format_coef,
        )
        unknown = sorted(set(kinds) - set(QUESTION_KINDS))
        if not kinds or unknown:
            raise ValueError(f"kinds must be a non-empty subset of {sorted(QUESTION_KINDS)}, got {kinds!r}")
        if not 1 <= top_k <= 10 or "{question}" not in task:
            raise ValueError("top_k must be in 1..10 and task must contain {question}")
        rng = random.Random(ctx.seed)
        self.question = draw_for_split(
            lambda: draw_question(rng, tuple(kinds)), lambda q: q.subject, ctx.split
        )
        self._task_template = task
        self._tools = [make_search_tool(top_k)]

    def tools(self) -> Sequence[Tool]:
        return self._tools

    def task(self) -> str:
        return self._task_template.format(question=self.question.text)

    def demonstration(self) -> list[Message]:
        # About someone outside the atlas, so the example never gives away an answer.
        call = ToolCall.create("search", {"query": DEMO_PERSON}, "call_example")
        result = f"[1] {DEMO_PERSON} is a chemist who was born in Ardel in 1970."
        return [
            {
                "role": "user",
                "content": self._task_template.format(question=f"In what year was {DEMO_PERSON} born?"),
            },
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": result, "tool_call_id": "call_example", "name": "search"},
        ]

    def reference_reply(self) -> str:
        return self.question.answer

    def idle_answer(self) -> str:
        return JUNK_ANSWER

    def idle_call(self) -> ToolCall:
        return ToolCall.create("search", {"query": JUNK_ANSWER}, "probe_idle")

    async def score(self, answer: str | None) -> Score:
        if answer is None:
            return Score(False, self.question.answer, "no answer")
        correct, detail = answer_matches(answer, self.question.answer)
        return Score(correct, self.question.answer, detail)
