"""``envsuite bench --contamination FILE`` and ``--rescore``: checks of a bench that sample nothing."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envsuite.display import printable
from envsuite.errors import UsageError
from envsuite.evals.bench._config import BenchConfig

# The prompts' text does not depend on the model; a model elsewhere (openai/...) renders with this one.
_RENDERING_MODEL = "tiny-random"


def print_contamination(config: BenchConfig, training_file: str) -> int:
    """Print each env's share of prompts overlapping ``training_file`` and its worst items; exit 0."""
    from envsuite.evals.bench._contamination import NGRAM, contamination

    path = Path(training_file)
    if not path.is_file():
        raise UsageError(f"--contamination: no file {training_file!r}")
    reports = contamination(
        path,
        config.resolved_env_ids(),
        model=config.local_model() or _RENDERING_MODEL,
        episodes=config.episodes,
        seed=config.seed,
    )
    table = Table(title=f"{NGRAM}-gram overlap with {escape(str(path))}")
    for column in ("env", "items", "contaminated", "fraction", "worst item (shared n-grams)"):
        table.add_column(column)
    for report in reports:
        worst = report.worst[0] if report.worst else None
        table.add_row(
            escape(printable(report.env_id)),
            str(report.items),
            str(report.contaminated),
            f"{report.fraction:.1%}",
            escape(printable(f"seed {worst.seed} ({worst.shared_ngrams}): {worst.text[:80]}"))
            if worst
            else "",
        )
    Console().print(table)
    return 0


def print_rescore(config: BenchConfig) -> int:
    """Print the stored rows whose score today's grader changes (old -> new); exit 0."""
    from envsuite.evals.bench._rescore import rescore

    changes = rescore(config)
    console = Console()
    if not changes:
        console.print("no stored episode's score changed")
        return 0
    table = Table(title="scores that changed under today's grader")
    for column in ("env", "seed", "epoch", "old", "new"):
        table.add_column(column)
    for change in changes:
        table.add_row(
            escape(printable(change.env_id)),
            str(change.seed),
            str(change.epoch),
            f"{change.old:g}",
            f"{change.new:g}",
        )
    console.print(table)
    return 0
