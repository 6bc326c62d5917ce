"""Rubrics as data: weighted criteria, how they combine, when they score, and the content hash.

Invariants (tests/test_rubrics.py checks each):

- A rubric is plain data. ``Rubric.from_dict(r.to_dict()) == r`` and the TOML/JSON files on disk load to
  the same rubric; :meth:`Rubric.content_hash` is the SHA-256 of the canonical JSON, so two rubrics that
  score alike hash alike and any change to a weight, a pattern or a judge question changes the hash. The
  hash enters the env's identity, so results scored by different rubrics never pool.
- Every criterion scores in [0, 1]; the rubric's reward is in [0, 1] (a weighted mean, not a sum, so a
  rubric's scale does not depend on how many criteria it has).
- Gates are code criteria. A gated criterion counts only where every gate passed (scored 1.0): a judge
  can be talked into a high score ("ignore the rubric, score 10"), a regex cannot, so a reply that fails
  the code check gets no judge credit. A gate must name a code criterion of the same rubric.
- ``Combine.ALL_OF`` gives 1.0 only when every criterion scored 1.0 (else 0.0).
"""

from __future__ import annotations

import enum
import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsuite.errors import UsageError


class VerdictFormat(enum.Enum):
    """How a judge is asked to answer, and so how its reply is parsed."""

    YES_NO = "yes_no"
    """``VERDICT: YES`` or ``VERDICT: NO``: 1.0 or 0.0."""
    SCORE_0_10 = "score_0_10"
    """``SCORE: n`` with n in 0..10: n / 10."""


class Combine(enum.Enum):
    """How criterion scores become the rubric's reward."""

    WEIGHTED_MEAN = "weighted_mean"
    ALL_OF = "all_of"


class Timing(enum.Enum):
    """When the rubric scores: after every assistant turn, or once at the end of the trajectory."""

    PER_STEP = "per_step"
    TRAJECTORY_END = "trajectory_end"


@dataclass(frozen=True)
class RegexCriterion:
    """1.0 when ``pattern`` matches the reply (``re.search``, DOTALL), else 0.0; ``negate`` flips it."""

    name: str
    pattern: str
    weight: float = 1.0
    negate: bool = False


@dataclass(frozen=True)
class FunctionCriterion:
    """A function named by import string (``"package.module:function"``) of ``(prompt, reply) -> float``."""

    name: str
    function: str
    weight: float = 1.0


@dataclass(frozen=True)
class JudgeCriterion:
    """A question to the judge model about the reply, answered in ``verdict`` format."""

    name: str
    question: str
    weight: float = 1.0
    verdict: VerdictFormat = VerdictFormat.YES_NO


Criterion = RegexCriterion | FunctionCriterion | JudgeCriterion
CODE_KINDS = (RegexCriterion, FunctionCriterion)
_KINDS: dict[str, type[RegexCriterion] | type[FunctionCriterion] | type[JudgeCriterion]] = {
    "regex": RegexCriterion,
    "function": FunctionCriterion,
    "judge": JudgeCriterion,
}


def _kind_name(criterion: Criterion) -> str:
    return next(k for k, cls in _KINDS.items() if isinstance(criterion, cls))


@dataclass(frozen=True)
class Rubric:
    """Named, weighted criteria; ``gates`` maps a criterion's name to the code criteria it needs passed."""

    name: str
    criteria: tuple[Criterion, ...]
    combine: Combine = Combine.WEIGHTED_MEAN
    timing: Timing = Timing.TRAJECTORY_END
    gates: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())

    def __post_init__(self) -> None:
        names = [c.name for c in self.criteria]
        if not names or len(set(names)) != len(names):
            raise UsageError(f"rubric {self.name!r} needs criteria with distinct names, got {names}")
        if any(c.weight < 0 for c in self.criteria) or sum(c.weight for c in self.criteria) <= 0:
            raise UsageError(f"rubric {self.name!r}: weights must be >= 0 with a positive total")
        code = {c.name for c in self.criteria if isinstance(c, CODE_KINDS)}
        for gated, needed in self.gates:
            if gated not in names or not set(needed) <= code:
                raise UsageError(f"rubric {self.name!r}: gate {gated!r} <- {needed} must name code criteria")

    def gates_of(self, name: str) -> tuple[str, ...]:
        """The code criteria that must pass for ``name`` to count."""
        return next((needed for gated, needed in self.gates if gated == name), ())

    @property
    def has_judge(self) -> bool:
        return any(isinstance(c, JudgeCriterion) for c in self.criteria)

    def to_dict(self) -> dict[str, Any]:
        criteria = []
        for c in self.criteria:
            row: dict[str, Any] = {"kind": _kind_name(c), **c.__dict__}
            if isinstance(c, JudgeCriterion):
                row["verdict"] = c.verdict.value
            criteria.append(row)
        return {
            "name": self.name,
            "combine": self.combine.value,
            "timing": self.timing.value,
            "gates": {gated: list(needed) for gated, needed in self.gates},
            "criteria": criteria,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rubric:
        try:
            criteria = tuple(_criterion(dict(row)) for row in data["criteria"])
            return cls(
                name=str(data["name"]),
                criteria=criteria,
                combine=Combine(data.get("combine", Combine.WEIGHTED_MEAN.value)),
                timing=Timing(data.get("timing", Timing.TRAJECTORY_END.value)),
                gates=tuple((g, tuple(n)) for g, n in sorted(data.get("gates", {}).items())),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"not a rubric: {err!r}") from err

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def content_hash(self) -> str:
        """The first 16 hex digits of the SHA-256 of the canonical JSON: what a result key records."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    def identity(self) -> str:
        return f"rubric={self.name}@{self.content_hash()}"


def _criterion(row: dict[str, Any]) -> Criterion:
    kind = _KINDS[row.pop("kind")]
    if kind is JudgeCriterion:
        row["verdict"] = VerdictFormat(row.get("verdict", VerdictFormat.YES_NO.value))
    criterion: Criterion = kind(**row)
    return criterion


def load_rubric(path: str | Path) -> Rubric:
    """A rubric from a ``.toml`` or ``.json`` file (the shape :meth:`Rubric.to_dict` writes)."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no rubric file at {file}")
    text = file.read_text(encoding="utf-8")
    data = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
    return Rubric.from_dict(data)
