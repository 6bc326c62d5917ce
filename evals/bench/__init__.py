"""``envsuite bench``: one model or checkpoint across catalog envs, as Inspect logs, into the leaderboard.

* ``_run``: the phases (check the model, resolve the envs, play them with a runner, store each env).
* ``_config``: :class:`BenchConfig` and :class:`BenchReport`, and the runners' names (:data:`RUNNERS`).
* ``_inspect_runner``: the ``inspect`` runner (an Inspect eval set, any Inspect model).
* ``_progress``, ``_rows``: the progress display, and rows into the result store (:func:`import_log`).

The ``direct`` runner (envsuite models, the default for them) is ``envsuite.evals.direct``.
"""

from envsuite.evals.bench._config import RUNNERS, BenchConfig, BenchReport
from envsuite.evals.bench._rows import import_log
from envsuite.evals.bench._run import run_bench

__all__ = [
    "BenchConfig",
    "BenchReport",
    "RUNNERS",
    "import_log",
    "run_bench",
]
