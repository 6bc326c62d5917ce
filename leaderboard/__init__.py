"""leaderboard: a result store for evaluations and games, rankings with confidence intervals, and views.

Producers (``evals/``, a user's loop) write :class:`RunRecord` + :class:`EpisodeResult` rows and
:class:`MatchResult` games into a :class:`ResultStore`; :func:`build_leaderboard` ranks them and
:func:`render_terminal` / :func:`write_html` show them. See docs/leaderboard.md.
"""

from __future__ import annotations

from envsuite.leaderboard._board import Leaderboard, OverallScore, build_leaderboard
from envsuite.leaderboard._compare import EnvComparison, HeadToHead, MatrixCell
from envsuite.leaderboard._db import (
    DEFAULT_DB_ENV,
    Backend,
    DatabaseURL,
    MissingDriverError,
    StoreNotFoundError,
    StoreURLError,
    default_url,
    parse_url,
)
from envsuite.leaderboard._export import BoardJson, board_dict, board_json
from envsuite.leaderboard._html import HtmlReport, render_html, write_html
from envsuite.leaderboard._locate import (
    STORE_FILE_NAME,
    STORE_SEARCH_ROOT,
    NoStoreError,
    StoreChoice,
    choose_store,
    find_stores,
)
from envsuite.leaderboard._passk import MixedPlaysError, pass_at_ks, plays_per_problem
from envsuite.leaderboard._ratings import ALL_GAMES, compute_ratings
from envsuite.leaderboard._records import (
    SAMPLES_SETTING,
    AddRunResult,
    Entrant,
    EpisodeResult,
    JsonScalar,
    JsonValue,
    MatchResult,
    Rating,
    ResultKey,
    RunRecord,
    SampleId,
    StoredEpisode,
    StoredRun,
    canonical_json,
    canonical_seeds,
    file_identity,
    split_env_id,
)
from envsuite.leaderboard._sanitize import REDACTED, is_secret_name, redact_text, sanitize
from envsuite.leaderboard._schema import MIGRATIONS, SCHEMA_VERSION, Migration, SchemaTooNewError, migrate
from envsuite.leaderboard._serve import RangeRequestHandler, start_server
from envsuite.leaderboard._stats import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_CONFIDENCE,
    EpisodeRef,
    Estimate,
    KeySummary,
    NoPairsError,
    PairedComparison,
    PassAtK,
    PassAtKs,
    paired_comparison,
)
from envsuite.leaderboard._store import ResultStore, RunConflictError, recompute_ratings
from envsuite.leaderboard._terminal import FittedTable, render_overall, render_ratings, render_terminal
from envsuite.leaderboard._text import display_text

__all__ = [
    # records (what producers write)
    "ResultKey",
    "Entrant",
    "SampleId",
    "RunRecord",
    "EpisodeResult",
    "MatchResult",
    "JsonScalar",
    "JsonValue",
    "SAMPLES_SETTING",
    "canonical_json",
    "canonical_seeds",
    "file_identity",
    "split_env_id",
    # the store
    "ResultStore",
    "AddRunResult",
    "StoredRun",
    "StoredEpisode",
    "RunConflictError",
    "Backend",
    "DEFAULT_DB_ENV",
    "DatabaseURL",
    "MissingDriverError",
    "StoreNotFoundError",
    "StoreURLError",
    "default_url",
    "parse_url",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "SchemaTooNewError",
    "migrate",
    # secrets
    "REDACTED",
    "is_secret_name",
    "redact_text",
    "sanitize",
    # ranking
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_CONFIDENCE",
    "Estimate",
    "EpisodeRef",
    "KeySummary",
    "MatrixCell",
    "HeadToHead",
    "EnvComparison",
    "Leaderboard",
    "OverallScore",
    "build_leaderboard",
    "NoPairsError",
    "PassAtK",
    "PassAtKs",
    "MixedPlaysError",
    "pass_at_ks",
    "plays_per_problem",
    "PairedComparison",
    "paired_comparison",
    # ratings
    "ALL_GAMES",
    "Rating",
    "compute_ratings",
    "recompute_ratings",
    # views
    "display_text",
    "FittedTable",
    "render_terminal",
    "render_overall",
    "render_ratings",
    "HtmlReport",
    "render_html",
    "write_html",
    "start_server",
    "RangeRequestHandler",
    "BoardJson",
    "board_dict",
    "board_json",
    # which store to read
    "STORE_FILE_NAME",
    "STORE_SEARCH_ROOT",
    "choose_store",
    "find_stores",
    "StoreChoice",
    "NoStoreError",
]
