"""The seam to BFCL's multi-turn categories: its entries, its simulated APIs, its call strings, its verdict.

BFCL's multi-turn evaluation (``eval_runner._evaluate_single_multi_turn_entry`` and
``multi_turn_checker``) re-executes the model's calls, as Python call strings, on fresh instances of its
simulated APIs (a file system, a trading bot, a travel agency, ...) beside the ground truth's, turn by
turn, and compares their states and results. It runs those strings with ``eval``, and keeps the
instances in its module's globals under a name made of the model's name and the entry's id.

So, here:

* the live episode calls the API instances' methods directly (:class:`ApiSession`), never ``eval``;
  results are turned into text as BFCL's ``execute_multi_turn_func_call`` turns them;
* the strings handed to BFCL's checker are made only from calls it could not be tricked by
  (:func:`call_string`): a method some involved class really has, argument names that are
  identifiers, values written with ``repr`` of JSON values. Anything else becomes a call to a name
  that is never defined, which BFCL's checker runs as the error it would have been (a call to a
  function the API lacks) — the model's text never reaches ``eval`` as code;
* each verdict runs under a model name of its own and its instances are removed from BFCL's globals
  afterwards, so concurrent episodes of one entry never share state, and nothing accumulates.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envsuite.envs.bfcl._upstream import JsonDict, Verdict, _modules

UNDEFINED_CALL = "envsuite_function_not_offered()"
"""What a call that cannot be written safely becomes in the checker's strings (a NameError there)."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@functools.cache
def _multi() -> Any:
    _modules()  # BFCL's import preparation (its vendor-SDK stand-in, its project root)
    from bfcl_eval.constants.default_prompts import (
        DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
        MAXIMUM_STEP_LIMIT,
    )
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return type(
        "BfclMulti",
        (),
        {
            "added_functions_prompt": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
            "step_limit": MAXIMUM_STEP_LIMIT,
            "class_paths": CLASS_FILE_PATH_MAPPING,
            "stateless": STATELESS_CLASSES,
            "eval_runner": eval_runner,
            "utils": multi_turn_utils,
        },
    )


def step_limit() -> int:
    """BFCL's steps per user turn before a model is forced to quit (the entry then fails)."""
    return int(_multi().step_limit)


def added_functions_prompt() -> str:
    """The user message BFCL sends on a turn that adds held-out functions (miss_func)."""
    return str(_multi().added_functions_prompt)


@functools.cache
def load_answers(category: str) -> dict[str, list[list[str]]]:
    """The ground truth of a multi-turn category by entry id: per turn, BFCL's call strings."""
    entries = _modules().load_dataset_entry(
        category, include_prereq=False, include_language_specific_hint=True
    )
    answers = _modules().load_ground_truth_entry(category)
    return {e["id"]: a["ground_truth"] for e, a in zip(entries, answers, strict=True)}


def _is_long_context(category: str) -> bool:
    return "long_context" in category or "composite" in category


class ApiSession:
    """One episode's instances of an entry's simulated APIs, loaded with its initial configuration."""

    def __init__(self, entry: JsonDict, category: str) -> None:
        import importlib

        self.instances: dict[str, Any] = {}
        for name in entry["involved_classes"]:
            instance = getattr(importlib.import_module(_multi().class_paths[name]), name)()
            if name not in _multi().stateless:
                config = copy.deepcopy(entry.get("initial_config", {}).get(name, {}))
                instance._load_scenario(config, long_context=_is_long_context(category))
            self.instances[name] = instance
        self.methods: dict[str, Any] = {}
        for instance in self.instances.values():
            for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self.methods[method_name] = method

    def run(self, name: str, arguments: object) -> str:
        """Call ``name`` with ``arguments``; the result as the text BFCL's execution gives the model."""
        method = self.methods.get(name)
        if method is None:
            return f"Error during execution: name '{name}' is not defined"
        if not isinstance(arguments, dict):
            return "Error during execution: the arguments are not a JSON object"
        try:
            result = method(**arguments)
        except Exception as exc:  # an API's own refusal, a wrong argument: the model reads it, as in BFCL
            return f"Error during execution: {exc}"
        if isinstance(result, str):
            return result
        if isinstance(result, dict):
            try:
                return json.dumps(result)
            except (TypeError, ValueError):
                return str(result)
        return str(result)


def call_string(name: str, arguments: object, known: Sequence[str]) -> str:
    """One call as BFCL's decoded execution string (``convert_to_function_call``'s ``f(a='x',b=1)``),
    or :data:`UNDEFINED_CALL` where it cannot be written without letting the model's text be code."""
    if name not in known or not _IDENTIFIER.match(name) or not isinstance(arguments, dict):
        return UNDEFINED_CALL
    parts = []
    for key, value in arguments.items():
        if not isinstance(key, str) or not _IDENTIFIER.match(key) or not _literal(value):
            return UNDEFINED_CALL
        parts.append(f"{key}={value!r}")
    return f"{name}({','.join(parts)})"


def _literal(value: object) -> bool:
    """A JSON value whose ``repr`` reads back as the same Python literal."""
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, list):
        return all(_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _literal(v) for k, v in value.items())
    return False


def ground_truth_calls(call: str, session: ApiSession) -> tuple[str, dict[str, Any]]:
    """A ground-truth call string (``sort('a.pdf')``) as a name and keyword arguments, positional ones
    bound to the method's parameter names (for the reference episode)."""
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {call!r}")
    name = node.func.id
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    bound = inspect.signature(session.methods[name]).bind(*args, **kwargs)
    return name, dict(bound.arguments)


class _Steps:
    """What BFCL's multi-turn scoring takes as a handler: each step's call strings, already decoded."""

    def decode_execute(self, result: object, has_tool_call_tag: bool = False) -> list[str]:
        if not isinstance(result, list):
            raise ValueError("no readable call in this step")
        return result


@dataclass(frozen=True)
class Transcript:
    """An episode's calls as BFCL stores a model's result: per turn, per step, the call strings (a step
    whose reply held no readable call is ``None``, as a failed decode is there)."""

    turns: list[list[list[str] | None]]


def score(category: str, entry: JsonDict, transcript: Transcript) -> Verdict:
    """BFCL's multi-turn verdict on ``transcript`` (a run forced to quit has fewer turns: it fails)."""
    m = _multi()
    model = f"envsuite_{uuid.uuid4().hex}"
    prompt_entry = copy.deepcopy(entry)
    answer = load_answers(category)[entry["id"]]
    try:
        result = m.eval_runner._evaluate_single_multi_turn_entry(
            _Steps(), entry["id"], transcript.turns, answer, prompt_entry, model, category
        )
    except Exception as exc:  # where BFCL's checker itself raises, its run would stop: scored 0 here
        return Verdict(False, "checker_error", f"{type(exc).__name__}: {exc}"[:500])
    finally:
        stale = [key for key in vars(m.utils) if model in key]
        for key in stale:
            delattr(m.utils, key)
    if result["valid"]:
        return Verdict(True)
    error = result.get("error", {})
    kind = str(error.get("error_type", "")) if isinstance(error, dict) else ""
    message = error.get("error_message", "") if isinstance(error, dict) else error
    return Verdict(False, kind, str(message)[:500])
