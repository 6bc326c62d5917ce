"""Keep secrets out of the store: redact secret-looking keys, key-shaped values and live key values.

Everything the store writes passes through here, so a config dump that carries ``api_key`` or a
transcript that echoes ``$TINKER_API_KEY`` never reaches a row, a log line or a rendered page.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import os
import re
from collections.abc import Iterator, Mapping

from envsuite.leaderboard._records import JsonValue

REDACTED = "[REDACTED]"

# Segments of a key name that mark it secret. Matched per segment so that "max_tokens" and
# "tokenizer" stay readable while "access_token" and "apiKey" do not.
_SECRET_SEGMENTS = frozenset(
    {"token", "secret", "password", "passwd", "pwd", "apikey", "credential", "credentials", "authorization"}
)
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key")})
_SEGMENT_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

# Key-shaped values regardless of where they appear (OpenAI/Anthropic/Tinker-style, bearer headers,
# GitHub and HF tokens, AWS access key ids).
_KEY_LIKE = re.compile(
    r"(?:\b(?:sk|rk|pk)-[A-Za-z0-9_\-]{12,}"
    r"|\bBearer\s+[A-Za-z0-9._\-]{12,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bhf_[A-Za-z0-9]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b)"
)
_MIN_ENV_SECRET_LEN = 8


def is_secret_name(name: str) -> bool:
    """Whether a config/metadata key name looks like it holds a credential."""
    segments = [s.lower() for s in _SEGMENT_SPLIT.split(name) if s]
    if any(s in _SECRET_SEGMENTS for s in segments):
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(segments))


# Shell variables whose names contain a secret-looking segment ("pwd") but hold the working
# directory: scrubbing their values would redact every path under it (log links, run dirs).
_PATH_ENV_NAMES = frozenset({"PWD", "OLDPWD"})


def _looks_like_path(value: str) -> bool:
    """A filesystem path, not a credential (``GOOGLE_APPLICATION_CREDENTIALS`` names a file)."""
    return value.startswith(("/", "~", "./", "../")) or os.path.exists(value)


_SNAPSHOT: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "envsuite_secret_values", default=None
)


@contextlib.contextmanager
def environment_read_once() -> Iterator[None]:
    """Within the block, the secret values of the environment are read once, not per string: the store
    redacts every field of every episode it writes, and rescanning the environment for each one cost
    ~0.4 ms a string (most of an ``envsuite bench`` import, bench/eval_overhead.py)."""
    token = _SNAPSHOT.set(_read_env_secret_values())
    try:
        yield
    finally:
        _SNAPSHOT.reset(token)


def _env_secret_values() -> tuple[str, ...]:
    snapshot = _SNAPSHOT.get()
    # Otherwise read at call time: a key exported after import must still be caught.
    return snapshot if snapshot is not None else _read_env_secret_values()


def _read_env_secret_values() -> tuple[str, ...]:
    values = {
        value
        for name, value in os.environ.items()
        if name not in _PATH_ENV_NAMES
        and is_secret_name(name)
        and len(value) >= _MIN_ENV_SECRET_LEN
        and not _looks_like_path(value)
    }
    return tuple(sorted(values, key=len, reverse=True))


def redact_text(text: str) -> str:
    """``text`` with key-shaped substrings and the values of secret env variables replaced."""
    for value in _env_secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    return _KEY_LIKE.sub(REDACTED, text)


def sanitize(value: object) -> JsonValue:
    """A JSON-ready copy of ``value`` with secrets redacted (secret-named keys lose their value); values
    JSON cannot spell are stored as their redacted ``repr``."""
    if isinstance(value, Mapping):
        clean: dict[str, JsonValue] = {}
        for raw_key, item in value.items():
            key = redact_text(str(raw_key))
            clean[key] = REDACTED if is_secret_name(str(raw_key)) else sanitize(item)
        return clean
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [sanitize(item) for item in items]
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; a missing value is the honest spelling
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(repr(value))
