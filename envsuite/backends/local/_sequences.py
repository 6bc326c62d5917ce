"""Sampling records for ``stable_reinforce``: what each sampled sequence was, per session, by ``sequence_id``.

A sampling client made with ``record_stability_info=True`` records every sequence it returns: its
sampled tokens, the sampler's logprob of each, and the length of the prompt it continued. A training
request with ``loss_fn="stable_reinforce"`` names those sequences through each datum's provenance
spans (``Datum.with_provenance``); :func:`provenance_inputs` turns the spans and the records into the
loss's derived inputs (the recorded sampler logprobs, which sequence each target token belongs to).

The rules are the hosted service's (tinker docs, StableReinforce): a record belongs to the session that
sampled it and is usable for one day after sampling; every training request that uses it restarts that
day. A datum without provenance, or naming a sequence that is unknown to the session or expired, is
refused with :class:`ProvenanceError` (never trained some other way).

:class:`SequenceStore` keeps the records in SQLite: in memory for an in-process
``LocalServiceClient`` (its session ends with the process), in a file under ``envsuite serve``'s state
dir, so a restarted server still has them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tinker
import torch
from tinker import types

from envsuite.engine.training import SAMPLER_LOGPROBS, SEQUENCE_INDEX, LossInputError

RECORD_TTL_S = 24 * 3600.0
"""How long a record stays usable after its last use (sampling, or a training request naming it)."""
_PURGE_EVERY_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sequences (
    session_id TEXT NOT NULL,
    sequence_id TEXT NOT NULL,
    prompt_length INTEGER NOT NULL,
    tokens BLOB NOT NULL,
    logprobs BLOB NOT NULL,
    last_used REAL NOT NULL,
    PRIMARY KEY (session_id, sequence_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sequences_by_last_used ON sequences (last_used);
"""


class ProvenanceError(LossInputError, tinker.RequestFailedError):
    """A ``stable_reinforce`` datum without provenance, or naming a sequence this session cannot use.

    It is the SDK's own failed-request error (``tinker.RequestFailedError``, category ``user``), the one
    a request refused by a server raises, and a :class:`LossInputError` like every other bad loss input.
    """

    def __init__(self, message: str) -> None:
        tinker.RequestFailedError.__init__(
            self, message, request_id="local", category=types.RequestErrorCategory.User
        )

    def __reduce__(self) -> tuple[type[ProvenanceError], tuple[str]]:
        return (type(self), (self.message,))


@dataclass(frozen=True)
class SequenceRecord:
    """What sampling recorded about one sequence."""

    sequence_id: str
    prompt_length: int
    tokens_T: np.ndarray
    """Sampled token ids (int32)."""
    logprobs_T: np.ndarray
    """The sampler's logprob of each sampled token (float32)."""


class SequenceStore:
    """Sequence records of every session, in SQLite (``path`` None: in memory), expiring ``ttl_s`` after
    their last use. Thread-safe (sampling engines and training workers call it from their threads)."""

    def __init__(
        self, path: Path | None = None, *, ttl_s: float = RECORD_TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self._clock = clock
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(":memory:" if path is None else str(path), check_same_thread=False)
        self._lock = threading.Lock()
        self._last_purge = float("-inf")
        with self._lock:
            if path is not None:
                # WAL: a committed record survives the process being killed; readers never wait on it.
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)

    def scope(self, session_id: str) -> SequenceScope:
        """The records of one session."""
        return SequenceScope(self, session_id)

    def record(
        self,
        session_id: str,
        sequence_ids: Sequence[str],
        prompt_length: int,
        sequences: Sequence[types.SampledSequence],
    ) -> None:
        """Keep ``sequences`` (one sampling request's) under ``sequence_ids`` for ``session_id``."""
        if len(sequence_ids) != len(sequences):
            raise ValueError(f"{len(sequence_ids)} sequence ids for {len(sequences)} sequences")
        now = self._clock()
        rows = []
        for sequence_id, sequence in zip(sequence_ids, sequences, strict=True):
            logprobs = sequence.logprobs
            if logprobs is None:
                raise ValueError(f"sequence {sequence_id!r} has no logprobs to record")
            tokens = np.asarray(sequence.tokens, dtype=np.int32)
            values = np.asarray(logprobs, dtype=np.float32)
            rows.append((session_id, sequence_id, prompt_length, tokens.tobytes(), values.tobytes(), now))
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO sequences VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._maybe_purge(now)

    def lookup(
        self, session_id: str, sequence_ids: Iterable[str], *, where: str = ""
    ) -> dict[str, SequenceRecord]:
        """The records of ``sequence_ids`` in ``session_id``, each marked used now (its day restarts).

        Raises :class:`ProvenanceError` naming the first id that is unknown to the session or expired
        (``where`` prefixes the message, e.g. ``"datum 3: "``).
        """
        wanted = sorted(set(sequence_ids))
        now = self._clock()
        found: dict[str, SequenceRecord] = {}
        with self._lock, self._db:
            for sequence_id in wanted:
                row = self._db.execute(
                    "SELECT prompt_length, tokens, logprobs, last_used FROM sequences "
                    "WHERE session_id = ? AND sequence_id = ?",
                    (session_id, sequence_id),
                ).fetchone()
                if row is None:
                    raise ProvenanceError(
                        f"{where}sequence_id {sequence_id!r} is unknown to this session: stable_reinforce "
                        "trains only on sequences this session sampled with record_stability_info=True "
                        f"(records are kept {_duration(self.ttl_s)} after their last use)"
                    )
                prompt_length, tokens, logprobs, last_used = row
                if now - float(last_used) > self.ttl_s:
                    raise ProvenanceError(
                        f"{where}sequence_id {sequence_id!r} expired: its record was last used "
                        f"{_duration(now - float(last_used))} ago, and records are kept "
                        f"{_duration(self.ttl_s)} after their last use"
                    )
                found[sequence_id] = SequenceRecord(
                    sequence_id,
                    int(prompt_length),
                    np.frombuffer(tokens, dtype=np.int32),
                    np.frombuffer(logprobs, dtype=np.float32),
                )
            self._db.executemany(
                "UPDATE sequences SET last_used = ? WHERE session_id = ? AND sequence_id = ?",
                [(now, session_id, sequence_id) for sequence_id in wanted],
            )
        return found

    def purge(self) -> int:
        """Delete every expired record; returns how many."""
        now = self._clock()
        with self._lock, self._db:
            cursor = self._db.execute("DELETE FROM sequences WHERE last_used < ?", (now - self.ttl_s,))
            self._last_purge = now
            return int(cursor.rowcount)

    def count(self, session_id: str | None = None) -> int:
        """Records held (of one session, or all)."""
        with self._lock:
            if session_id is None:
                row = self._db.execute("SELECT COUNT(*) FROM sequences").fetchone()
            else:
                row = self._db.execute(
                    "SELECT COUNT(*) FROM sequences WHERE session_id = ?", (session_id,)
                ).fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _maybe_purge(self, now: float) -> None:
        if now - self._last_purge >= _PURGE_EVERY_S:
            self.purge()


@dataclass(frozen=True)
class SequenceScope:
    """One session's view of a :class:`SequenceStore`: what a sampling client records into and a
    training client reads from."""

    store: SequenceStore
    session_id: str

    def record_response(
        self, prompt_length: int, response: types.SampleResponse, sequence_ids: Sequence[str] | None = None
    ) -> None:
        """Record a sampling response's sequences (under their own ``sequence_id`` unless given)."""
        ids = [s.sequence_id for s in response.sequences] if sequence_ids is None else list(sequence_ids)
        self.store.record(self.session_id, ids, prompt_length, response.sequences)

    def lookup(self, sequence_ids: Iterable[str], *, where: str = "") -> dict[str, SequenceRecord]:
        return self.store.lookup(self.session_id, sequence_ids, where=where)


# -- provenance to loss inputs ---------------------------------------------------------------------


def provenance_inputs(
    data: Sequence[types.Datum], inputs_D: Sequence[dict[str, torch.Tensor]], scope: SequenceScope | None
) -> list[dict[str, torch.Tensor]]:
    """Each datum's derived ``stable_reinforce`` inputs (:data:`SAMPLER_LOGPROBS`, :data:`SEQUENCE_INDEX`).

    Every datum must carry provenance whose runs tile its targets (and its model input), name sequences
    of this session's records, stay inside them, reproduce the sampled tokens where they claim to, and
    put nonzero advantages only on sampled tokens; anything else raises :class:`ProvenanceError`.
    """
    derived: list[dict[str, torch.Tensor]] = []
    for index, (datum, inputs) in enumerate(zip(data, inputs_D, strict=True)):
        where = f"datum {index}: "
        if datum.loss_fn_input_spans is None or datum.model_input_spans is None:
            raise ProvenanceError(
                f"{where}stable_reinforce needs provenance on every datum: sample with "
                "record_stability_info=True and attach Datum.with_provenance(...) naming the sampled "
                "sequence behind each token"
            )
        if scope is None:
            raise ProvenanceError(f"{where}this training client has no sampling records to read")
        spans_in, spans_out = datum.model_input_spans, datum.loss_fn_input_spans
        _check_tiling(where, "model_input", spans_in, datum.model_input.length)
        targets_T = inputs["target_tokens"]
        _check_tiling(where, "loss_fn_inputs", spans_out, int(targets_T.shape[0]))
        records = scope.lookup([span.sequence_id for span in [*spans_in, *spans_out]], where=where)
        for span in spans_in:
            _check_range(where, "model_input", span, records[span.sequence_id])
        derived.append(_target_inputs(where, spans_out, records, targets_T, inputs["advantages"]))
    return derived


def _target_inputs(
    where: str,
    spans: types.ProvenanceSpans,
    records: dict[str, SequenceRecord],
    targets_T: torch.Tensor,
    advantages_T: torch.Tensor,
) -> dict[str, torch.Tensor]:
    length = int(targets_T.shape[0])
    sampler_T = np.zeros(length, dtype=np.float32)
    sequence_T = np.full(length, -1.0, dtype=np.float32)
    local: dict[str, int] = {}
    start = 0
    for span in spans:
        record = records[span.sequence_id]
        _check_range(where, "loss_fn_inputs", span, record)
        stop = start + span.length
        if isinstance(span, types.SampledProvenanceSpan):
            sampled = record.tokens_T[span.offset : span.offset + span.length]
            if not np.array_equal(targets_T[start:stop].numpy().astype(np.int64), sampled.astype(np.int64)):
                raise ProvenanceError(
                    f"{where}target_tokens[{start}:{stop}] are not the tokens sequence "
                    f"{span.sequence_id!r} sampled at [{span.offset}:{span.offset + span.length}]"
                )
            sampler_T[start:stop] = record.logprobs_T[span.offset : span.offset + span.length]
            sequence_T[start:stop] = local.setdefault(span.sequence_id, len(local))
        elif bool((advantages_T[start:stop] != 0).any()):
            raise ProvenanceError(
                f"{where}nonzero advantages on prompt tokens [{start}:{stop}]: stable_reinforce only "
                "accepts nonzero advantages on sampled tokens"
            )
        start = stop
    return {SAMPLER_LOGPROBS: torch.from_numpy(sampler_T), SEQUENCE_INDEX: torch.from_numpy(sequence_T)}


def _check_tiling(where: str, field: str, spans: types.ProvenanceSpans, length: int) -> None:
    total = sum(span.length for span in spans)
    if total != length:
        raise ProvenanceError(
            f"{where}{field} provenance spans cover {total} positions but the field has {length}; the "
            "runs must tile it exactly"
        )


def _check_range(
    where: str,
    field: str,
    span: types.PromptProvenanceSpan | types.SampledProvenanceSpan,
    record: SequenceRecord,
) -> None:
    sampled = isinstance(span, types.SampledProvenanceSpan)
    size = int(record.tokens_T.shape[0]) if sampled else record.prompt_length
    if span.offset + span.length > size:
        kind = "sampled tokens" if sampled else "prompt tokens"
        raise ProvenanceError(
            f"{where}{field} span [{span.offset}:{span.offset + span.length}] of sequence "
            f"{span.sequence_id!r} runs past its {size} {kind}"
        )


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"
