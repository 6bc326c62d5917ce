"""``envsuite bench``'s direct runner: envsuite models play the episodes in this process with the code
Inspect's solver runs, each finished episode journalled, each env written as an ordinary Inspect log.

* ``_runner``: :class:`DirectBench` and the envs' runs (:func:`env_runs`).
* ``_log``: the episodes (:class:`EpisodeRecord`, :class:`Play`) and the Inspect log of an env
  (:func:`write_env_log`).
* ``_progress``: its progress display (:func:`direct_progress`).

The bench that chooses it is ``envsuite.evals.bench``.
"""

from envsuite.evals.direct._log import EpisodeRecord, Play, write_env_log
from envsuite.evals.direct._progress import direct_progress
from envsuite.evals.direct._runner import DirectBench, EnvRun, env_runs

__all__ = [
    # the runner
    "DirectBench",
    "EnvRun",
    "env_runs",
    # episodes and their Inspect logs
    "EpisodeRecord",
    "Play",
    "write_env_log",
    # progress
    "direct_progress",
]
