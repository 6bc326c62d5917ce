"""The one seam to the installed ``bfcl-eval`` package: its data, its tool conversion, its per-entry scoring.

Everything BFCL decides is BFCL's own code, called unchanged: the test entries and ground truth
(``bfcl_eval.utils.load_dataset_entry`` / ``load_ground_truth_entry``, with the language hints its
generation step adds to function descriptions), the cast of its function docs to JSON Schema types
(``_cast_to_openai_type`` with ``GORILLA_TO_OPENAPI``), and the verdict on one reply
(``eval_runner._evaluate_single_ast_entry`` and ``_evaluate_single_relevance_entry``: the decoder's output
format check, then the AST checker or the relevance rule). envsuite only decodes the reply: the renderer
reads the tool calls, and :class:`DecodedCalls` hands them to BFCL as its handlers' ``decode_ast`` would,
``[{name: {arg: value}}]``.

Two things make the package importable in envsuite's environment:

* ``bfcl_eval.constants.model_config`` imports a handler for every vendor BFCL supports, and with them
  the SDKs of Anthropic, Cohere, Mistral, Google, Writer, Qwen-Agent, ... (the wheel pins ``numpy==1.26.4``,
  ``networkx==3.3`` and ``filelock==3.20.0`` too, against torch's numpy 2 here). The checker reads one field
  of it, ``MODEL_CONFIG_MAPPING[model].underscore_to_dot``, and only for a function name holding a dot.
  When the real module is not already loaded, a stand-in with that one field is installed, for the model
  the scores are reported as (:data:`CHECKER_MODEL`, whose real entry says ``underscore_to_dot=False``:
  envsuite shows function names as BFCL wrote them, dots kept).
* ``bfcl_eval.constants.eval_config`` creates ``result/``, ``score/`` and ``.file_locks/`` under
  ``BFCL_PROJECT_ROOT`` on import (default: the folder above the installed package, site-packages). It is
  pointed at envsuite's cache unless the caller set it.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BFCL_VERSION = "2026.3.23"
"""The ``bfcl-eval`` release the catalog was built and checked against (BFCL v4's data inside it)."""
CHECKER_MODEL = "Qwen/Qwen3-8B-FC"
"""The BFCL registry entry scores are computed as: a function-calling model that keeps dots in names."""
INSTALL_HINT = (
    f"needs bfcl-eval (pip install 'envsuite[bfcl]' && pip install --no-deps bfcl-eval=={BFCL_VERSION}: "
    "its own requirements pin numpy 1.26 and every vendor SDK; the checker needs none of them)"
)

JsonDict = dict[str, Any]


def missing() -> str | None:
    """Why BFCL cannot run here (checked without importing it), or None."""
    for module in ("bfcl_eval", "tree_sitter", "tree_sitter_java", "tree_sitter_javascript", "overrides"):
        if importlib.util.find_spec(module) is None:
            return f"{INSTALL_HINT}; {module} is missing"
    return None


@dataclass(frozen=True)
class _ModelConfig:
    underscore_to_dot: bool = False


def _prepare_import() -> None:
    if "BFCL_PROJECT_ROOT" not in os.environ:
        root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "envsuite" / "bfcl"
        os.environ["BFCL_PROJECT_ROOT"] = str(root)
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stand_in = types.ModuleType(name)
        stand_in.__doc__ = "envsuite's stand-in: the checker's one field, without every vendor SDK."
        stand_in.MODEL_CONFIG_MAPPING = {CHECKER_MODEL: _ModelConfig()}  # type: ignore[attr-defined]
        sys.modules[name] = stand_in


@functools.cache
def _modules() -> types.SimpleNamespace:
    _prepare_import()
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.model_handler.utils import _cast_to_openai_type
    from bfcl_eval.utils import is_java, is_js, load_dataset_entry, load_ground_truth_entry

    return types.SimpleNamespace(
        Language=Language,
        ReturnFormat=ReturnFormat,
        GORILLA_TO_OPENAPI=GORILLA_TO_OPENAPI,
        eval_runner=eval_runner,
        cast_types=_cast_to_openai_type,
        is_java=is_java,
        is_js=is_js,
        load_dataset_entry=load_dataset_entry,
        load_ground_truth_entry=load_ground_truth_entry,
    )


@functools.cache
def load_entries(category: str) -> tuple[JsonDict, ...]:
    """A category's test entries as BFCL's generation step reads them (language hints included)."""
    entries = _modules().load_dataset_entry(
        category, include_prereq=False, include_language_specific_hint=True
    )
    return tuple(entries)


@functools.cache
def revision(category: str) -> str:
    """What a result row records of the data a category's episodes came from: the installed bfcl-eval
    release and a hash of the category's entries as the envs read them (the ground truth ships with them)."""
    entries = json.dumps(load_entries(category), sort_keys=True, default=str).encode()
    digest = hashlib.sha256(entries).hexdigest()[:16]
    return f"bfcl-eval=={importlib.metadata.version('bfcl-eval')} sha256:{digest}"


@functools.cache
def _scoring_entries(category: str) -> dict[str, JsonDict]:
    """A category's entries as BFCL's evaluation reads them (no language hints: its Java and JavaScript
    checks read the original type names, which the hints rewrite), by id."""
    entries = _modules().load_dataset_entry(
        category, include_prereq=False, include_language_specific_hint=False
    )
    return {entry["id"]: entry for entry in entries}


@functools.cache
def load_answers(category: str) -> dict[str, JsonDict]:
    """A category's ground truth by entry id (empty for relevance and irrelevance: they have none)."""
    if "relevance" in category:
        return {}
    entries = load_entries(category)
    answers = _modules().load_ground_truth_entry(category)
    # BFCL aligns the two files by position (some live ground-truth ids are spelled differently).
    return {entry["id"]: answer for entry, answer in zip(entries, answers, strict=True)}


def tool_parameters(function: JsonDict) -> JsonDict:
    """A BFCL function doc's parameters as JSON Schema (BFCL's own cast: ``dict`` -> ``object``, ...)."""
    parameters = copy.deepcopy(function.get("parameters") or {})
    parameters["type"] = "object"
    parameters["properties"] = _modules().cast_types(
        parameters.get("properties") or {}, _modules().GORILLA_TO_OPENAPI
    )
    return parameters


class DecodedCalls:
    """What BFCL's scoring functions take as a handler: ``decode_ast`` returns the calls envsuite's
    renderer read, in BFCL's decoded shape (an unreadable reply raises, as a failed decode does there)."""

    def __init__(self, calls: list[JsonDict] | None) -> None:
        self.calls = calls

    def decode_ast(self, result: object, language: object = None, has_tool_call_tag: bool = False) -> Any:
        if self.calls is None:
            raise ValueError("the reply holds no readable function call")
        return self.calls


@dataclass(frozen=True)
class Verdict:
    """BFCL's verdict on one reply: ``valid`` (its score, 1 or 0) and, when not, its error type."""

    valid: bool
    error_type: str = ""
    error: str = ""


def score(category: str, entry: JsonDict, calls: list[JsonDict] | None) -> Verdict:
    """BFCL's per-entry scoring of ``calls`` (None: the reply could not be decoded) for ``entry``."""
    m = _modules()
    handler = DecodedCalls(calls)
    model = CHECKER_MODEL.replace("/", "_")
    prompt_entry = copy.deepcopy(_scoring_entries(category)[entry["id"]])
    try:
        if "relevance" in category:
            result = m.eval_runner._evaluate_single_relevance_entry(
                handler, entry["id"], None, prompt_entry, model, category
            )
        else:
            language, return_format = _language(category)
            answer = load_answers(category)[entry["id"]]["ground_truth"]
            result = m.eval_runner._evaluate_single_ast_entry(
                handler, entry["id"], None, answer, prompt_entry, model, category, language, return_format
            )
    except Exception as exc:
        # BFCL's checker assumes well-typed calls in places (e.g. it indexes a type table by the value's
        # type name); where it raises, its own run would stop, and the reply is scored 0 here.
        return Verdict(False, "checker_error", f"{type(exc).__name__}: {exc}"[:500])
    if result["valid"]:
        return Verdict(True)
    return Verdict(False, str(result.get("error_type", "")), str(result.get("error", ""))[:500])


def _language(category: str) -> tuple[Any, Any]:
    m = _modules()
    if m.is_java(category):
        return m.Language.JAVA, m.ReturnFormat.JAVA
    if m.is_js(category):
        return m.Language.JAVASCRIPT, m.ReturnFormat.JAVASCRIPT
    return m.Language.PYTHON, m.ReturnFormat.PYTHON
