"""``python -m envsuite.games.twenty_questions``: the rule answerer's accuracy on the held-out labelled set."""

from __future__ import annotations

import asyncio
import sys

from envsuite.games.twenty_questions._evaluation import (
    DEV_FILE,
    LABELLED_FILE,
    evaluate_answerer,
    load_labelled_cases,
)
from envsuite.games.twenty_questions._rules import RuleAnswerer


def main(argv: list[str]) -> int:
    answerer = RuleAnswerer()
    for name in (LABELLED_FILE, DEV_FILE):
        report = asyncio.run(evaluate_answerer(answerer, load_labelled_cases(name)))
        labels = ", ".join(f"{k} {c}/{t}" for k, (c, t) in sorted(report.per_label.items()))
        print(
            f"{name}: {report.correct}/{report.total} = {report.accuracy:.1%} "
            f"(confident wrong {report.confident_wrong}; {labels}) [{answerer.identity()}]"
        )
        if "-v" in argv:
            for case, got in report.misses:
                print(f"  {case.word!r}: {case.question!r} -> {got.value!r}, label {case.answer.value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
