"""Inspect AI integration: a model provider for envsuite models, a task per catalog env, partners.

``inspect eval ... --model envsuite/smollm2-135m-instruct`` works from the shell through the package's
``inspect_ai`` entry point. Importing this package imports inspect_ai.
"""

from envsuite.evals._partners import InspectMessageCompleter
from envsuite.evals._sandbox import EnvsuiteSandboxConfig, EnvsuiteSandboxEnvironment
from envsuite.evals._task import env_reward, envsuite_env, episode_seeds, play_env, sample_id
from envsuite.evals.bench import RUNNERS, BenchConfig, BenchReport, import_log, run_bench

__all__ = [
    # tasks, solvers and scorers
    "env_reward",
    "envsuite_env",
    "episode_seeds",
    "play_env",
    "sample_id",
    # the `envsuite` Inspect sandbox (bash() and python() offline)
    "EnvsuiteSandboxConfig",
    "EnvsuiteSandboxEnvironment",
    # partners
    "InspectMessageCompleter",
    # envsuite bench
    "BenchConfig",
    "BenchReport",
    "RUNNERS",
    "import_log",
    "run_bench",
]
