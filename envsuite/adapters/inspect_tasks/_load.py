"""An Inspect task as the catalog sees it: loaded once, its samples as prompts, its scorer's grader.

``inspect:MODULE/TASK`` imports ``MODULE`` (dotted; ``inspect_evals/NAME`` also tries
``inspect_evals.NAME``, where Inspect Evals keeps each task) and calls its ``@task`` function ``TASK``;
``inspect:path/to/file.py@TASK`` loads the file. Only what a single-turn catalog episode can play is
accepted: the solver chain may set a system message or a prompt template, format a multiple choice
question and generate once; tools, agents and multi-turn solvers are refused, saying which.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspect_ai import Task
from inspect_ai._util.registry import registry_info, registry_params
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Scorer

from envsuite.core import Message

SCHEME = "inspect"

# Solvers a one-reply episode reproduces (by Inspect registry name). Everything else (use_tools, react,
# basic_agent, self_critique, a custom solver) may call the model again or give it tools: refused.
_SINGLE_TURN_SOLVERS = frozenset(
    {"generate", "system_message", "prompt_template", "multiple_choice", "user_message"}
)
# Inspect's multiple_choice template (single answer), so a task's questions read as Inspect shows them.
_MULTIPLE_CHOICE = (
    "Answer the following multiple choice question. The entire content of your response should be of the "
    "following format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of {letters}.\n\n"
    "{question}\n\n{choices}"
)


class UnsupportedInspectTask(ValueError):
    """The task needs what a single-turn catalog episode does not give (tools, more model turns)."""


@dataclass(frozen=True)
class LoadedTask:
    """A task's samples, its scorers and the one-turn solver steps the env replays."""

    name: str
    samples: tuple[Sample, ...]
    scorers: tuple[Scorer, ...]
    system: str | None
    """The system message its solver sets (None: none)."""
    template: str | None
    """Its prompt template (``{prompt}`` is the sample's input), None: the input as it is."""
    grader: str | None
    """The model a model-graded scorer asks (part of the env's identity), None: no model grades."""
    dataset_hash: str
    """sha256 (first 16 hex digits) of the samples' inputs, choices and targets: what the rows ran on."""


def task_ref(env_id: str) -> str:
    """``inspect:REF`` -> ``REF`` (a stored scheme id carries version 0 as ``-v0``)."""
    return env_id.split(":", 1)[1].removesuffix("-v0")


def _task_function(ref: str) -> Any:
    if "@" in ref:  # path/to/file.py@TASK
        path, name = ref.rsplit("@", 1)
        location = Path(path).resolve()
        module_spec = importlib.util.spec_from_file_location(f"_inspect_task_{location.stem}", location)
        if module_spec is None or module_spec.loader is None or not location.is_file():
            raise ImportError(f"no task file {path!r}")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return getattr(module, name)
    if "/" not in ref:
        raise ValueError(f"an Inspect task id is inspect:MODULE/TASK or inspect:FILE.py@TASK, not {ref!r}")
    package, name = ref.rsplit("/", 1)
    module = importlib.import_module(package.replace("/", "."))
    if not hasattr(module, name):  # Inspect Evals keeps task NAME in inspect_evals.NAME
        module = importlib.import_module(f"{module.__name__}.{name}")
    return getattr(module, name)


def _solver_steps(task: Task) -> tuple[str | None, str | None]:
    """The system message and prompt template of ``task``'s solver chain; refuses other solvers."""
    system: str | None = None
    template: str | None = None
    for solver in getattr(task.solver, "_solvers", [task.solver]):
        name = registry_info(solver).name.split("/")[-1]
        if name not in _SINGLE_TURN_SOLVERS:
            raise UnsupportedInspectTask(
                f"its solver {name!r} may call tools or the model more than once; a catalog env plays "
                f"one reply (solvers it replays: {', '.join(sorted(_SINGLE_TURN_SOLVERS))})"
            )
        params = registry_params(solver)
        if name == "system_message":
            system = str(params.get("template", ""))
        elif name == "prompt_template":
            template = str(params.get("template", "{prompt}"))
    return system, template


def _grader(scorers: tuple[Scorer, ...]) -> str | None:
    """The grader model a model-graded scorer names (``model=``); the task's default model otherwise."""
    for scorer in scorers:
        info = registry_info(scorer)
        if "model_graded" in info.name or "model" in registry_params(scorer):
            model = registry_params(scorer).get("model")
            return str(model) if model else "the eval's own model"
    return None


def _digest(samples: tuple[Sample, ...]) -> str:
    items = [
        {
            "input": str(s.input) if isinstance(s.input, str) else [m.text for m in s.input],
            "choices": s.choices,
            "target": s.target,
        }
        for s in samples
    ]
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def load_task(ref: str) -> LoadedTask:
    """The task behind ``inspect:REF``, loaded once per process."""
    task = _task_function(ref)()
    if not isinstance(task, Task):
        raise TypeError(f"{ref!r} returned {type(task).__name__}, not an Inspect Task")
    samples = tuple(task.dataset)
    if not samples:
        raise ValueError(f"Inspect task {ref!r} has no samples")
    if task.setup is not None or any(s.sandbox or s.files or s.setup for s in samples):
        raise UnsupportedInspectTask("its samples need a sandbox, files or setup, which a catalog env lacks")
    scorers = tuple(task.scorer or ())
    if not scorers:
        raise UnsupportedInspectTask("it has no scorer, so there is no reward")
    system, template = _solver_steps(task)
    return LoadedTask(ref, samples, scorers, system, template, _grader(scorers), _digest(samples))


def opening(loaded: LoadedTask, sample: Sample) -> list[Message]:
    """The messages posed to the model for ``sample``: the system message, then the question."""
    messages: list[Message] = []
    if loaded.system:
        messages.append(Message(role="system", content=loaded.system))
    if isinstance(sample.input, str):
        turns = [("user", sample.input)]
    else:  # chat-message input: its turns as they are
        turns = [(str(m.role), m.text) for m in sample.input if m.role != "tool"]
    for index, (role, text) in enumerate(turns):
        last_user = role == "user" and index == max(i for i, (r, _) in enumerate(turns) if r == "user")
        if last_user and loaded.template:
            text = loaded.template.replace("{prompt}", text)
        if last_user and sample.choices:
            text = multiple_choice_prompt(text, sample.choices)
        messages.append(Message(role=role, content=text))
    return messages


def multiple_choice_prompt(question: str, choices: list[str]) -> str:
    letters = [chr(ord("A") + i) for i in range(len(choices))]
    listed = "\n".join(f"{letter}) {choice}" for letter, choice in zip(letters, choices, strict=True))
    return _MULTIPLE_CHOICE.format(letters=",".join(letters), question=question, choices=listed)
