"""Trajectories to training datums, merging turns whose observations extend each other.

A turn's tokens are ``observation + action``. When the next observation starts with exactly that
sequence (renderers with the extension property, single-turn envs trivially), the next turn only
appends to it, so the whole episode trains as one sequence: a 20-turn game costs O(T) tokens, not
O(T^2). Where the next observation does not extend the previous one (a renderer that rewrites
history, a context reset), a new datum starts.

Layout of one datum (Tinker's): ``model_input`` is the full sequence without its last token,
``target_tokens`` the sequence shifted left by one. Position ``t`` predicts token ``t + 1``; positions
that predict an action token carry the sampler's logprob and the trajectory's advantage, positions
that predict observation tokens carry 0 and 0 (and mask 0, kept outside the datum for metrics: the
policy losses take no weights).

Provenance (``Datum.with_provenance``, what ``stable_reinforce`` reads): while every turn's reply
carries the sampler's ``sequence_id``, each run of tokens is attributed as tinker-cookbook 0.6.1 does it:
a turn's new observation tokens are positions of the prompt its reply was sampled from
(``PromptProvenanceSpan``), its reply the sequence's sampled tokens (``SampledProvenanceSpan``).
:func:`loss_data` then shapes a batch for one loss (the one loss-input builder: :func:`loss_datum` per
datum, and the learner's own prompt logprobs where the loss needs them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import tinker

from envsuite.core import Trajectory, Transition
from envsuite.losses import LossFn

Span = tinker.PromptProvenanceSpan | tinker.SampledProvenanceSpan


@dataclass
class SequenceBuilder:
    """One merged sequence under construction: tokens and, per token, whether the policy sampled it."""

    tokens_T: list[int] = field(default_factory=list)
    is_action_T: list[bool] = field(default_factory=list)
    logprobs_T: list[float] = field(default_factory=list)
    spans: list[Span] | None = field(default_factory=list)
    """Where every token came from, while every reply so far has a ``sequence_id``; else None."""

    def extends_to(self, observation_T: list[int]) -> bool:
        """True when ``observation_T`` starts with the whole sequence so far."""
        n = len(self.tokens_T)
        return n > 0 and len(observation_T) >= n and observation_T[:n] == self.tokens_T

    def append(self, tokens_T: list[int], logprobs_T: list[float] | None) -> None:
        is_action = logprobs_T is not None
        self.tokens_T.extend(tokens_T)
        self.is_action_T.extend([is_action] * len(tokens_T))
        self.logprobs_T.extend(logprobs_T if logprobs_T is not None else [0.0] * len(tokens_T))


@dataclass(frozen=True)
class TrainingDatum:
    """A datum ready for ``forward_backward`` plus what the trainer needs beside it."""

    datum: tinker.Datum
    mask_T: np.ndarray
    """1.0 where the position predicts a sampled (action) token, else 0.0."""
    sampler_logprobs_T: np.ndarray
    group_index: int
    """Which group of the batch it came from (minibatches keep groups whole)."""
    policy_version: int = 0
    """The policy version (optimizer steps taken) whose sampler produced its actions; the
    importance-sampling losses weigh it by the learner-to-sampler probability ratio, which corrects
    for the lag when it was sampled steps ago (async training)."""

    @property
    def n_action_tokens(self) -> int:
        return int(self.mask_T.sum())


def merge_turns(trajectory: Trajectory) -> list[SequenceBuilder]:
    """The trajectory's turns as sequences, one per run of turns that extend each other."""
    sequences: list[SequenceBuilder] = []
    current = SequenceBuilder()
    for transition in trajectory.transitions:
        action_T = list(transition.ac.tokens)
        if not action_T:
            continue
        observation_T = transition.ob.to_ints()
        if current.extends_to(observation_T):
            offset = len(current.tokens_T)
        else:
            if current.tokens_T:
                sequences.append(current)
            current = SequenceBuilder()
            offset = 0
        current.append(observation_T[offset:], None)
        logprobs = transition.ac.maybe_logprobs
        if logprobs is None or len(logprobs) != len(action_T):
            raise ValueError(
                "a sampled action has no per-token logprobs: RL training needs a TokenCompleter that "
                "reports them (e.g. SamplingTokenCompleter)"
            )
        _attribute(current, transition, offset, len(observation_T) - offset)
        current.append(action_T, list(logprobs))
    if current.tokens_T:
        sequences.append(current)
    return sequences


def _attribute(sequence: SequenceBuilder, transition: Transition, offset: int, length: int) -> None:
    """Spans of one turn: its new observation tokens (positions ``offset..`` of the prompt its reply was
    sampled from) and its reply; provenance ends at the first reply without a ``sequence_id``."""
    sequence_id = transition.ac.sequence_id
    if sequence.spans is None or sequence_id is None:
        sequence.spans = None
        return
    if length:
        sequence.spans.append(
            tinker.PromptProvenanceSpan(sequence_id=sequence_id, offset=offset, length=length)
        )
    sequence.spans.append(
        tinker.SampledProvenanceSpan(sequence_id=sequence_id, length=len(transition.ac.tokens))
    )


def _drop_position(spans: list[Span], first: bool) -> list[Span]:
    """The spans of the sequence without its first (``first``) or last token."""
    out = list(spans)
    index = 0 if first else -1
    span = out[index]
    shorter = dataclasses.replace(span, offset=span.offset + (1 if first else 0), length=span.length - 1)
    if shorter.length:
        out[index] = shorter
    else:
        del out[index]
    return out


def sequence_to_datum(
    sequence: SequenceBuilder, advantage: float, group_index: int, policy_version: int = 0
) -> TrainingDatum | None:
    """The datum of one merged sequence; None when it holds no sampled token to learn from."""
    if len(sequence.tokens_T) < 2:
        return None
    mask_T = np.asarray(sequence.is_action_T[1:], dtype=np.float32)
    if not mask_T.any():
        return None
    logprobs_T = np.asarray(sequence.logprobs_T[1:], dtype=np.float32) * mask_T
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(sequence.tokens_T[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData.from_numpy(np.asarray(sequence.tokens_T[1:], dtype=np.int64)),
            "logprobs": tinker.TensorData.from_numpy(logprobs_T),
            "advantages": tinker.TensorData.from_numpy(mask_T * np.float32(advantage)),
        },
    )
    if sequence.spans:
        datum = datum.with_provenance(
            model_input=_drop_position(sequence.spans, first=False),
            loss_fn_inputs=_drop_position(sequence.spans, first=True),
        )
    return TrainingDatum(datum, mask_T, logprobs_T, group_index, policy_version)


def trajectory_to_datums(
    trajectory: Trajectory, advantage: float, group_index: int, policy_version: int = 0
) -> list[TrainingDatum]:
    """All datums of one trajectory, every action token carrying ``advantage``."""
    datums = (sequence_to_datum(s, advantage, group_index, policy_version) for s in merge_turns(trajectory))
    return [d for d in datums if d is not None]


def loss_datum(training: TrainingDatum, loss_fn: LossFn) -> tinker.Datum:
    """The datum ``loss_fn`` takes: ``cross_entropy`` weights are the advantages, ``gspo`` takes the
    sequence ratio over the sampled tokens, ``stable_reinforce`` needs provenance; the rest take the
    policy-gradient inputs as they are."""
    datum = training.datum
    inputs = dict(datum.loss_fn_inputs)
    if loss_fn == LossFn.CROSS_ENTROPY:
        inputs = {"target_tokens": inputs["target_tokens"], "weights": inputs["advantages"]}
    elif loss_fn == LossFn.GSPO:
        inputs["sequence_ratio_mask"] = tinker.TensorData.from_numpy(training.mask_T)
    elif loss_fn == LossFn.STABLE_REINFORCE and datum.loss_fn_input_spans is None:
        raise ValueError(
            "stable_reinforce needs each reply's sequence_id (the sampler's SampledSequence.sequence_id), "
            "and this batch has a reply without one: use a completer that reports it (SamplingTokenCompleter "
            "does) or another loss"
        )
    return dataclasses.replace(datum, loss_fn_inputs=inputs)


LearnerLogprobs = Callable[[list[tinker.Datum]], Awaitable[list[np.ndarray]]]
"""The learner's logprob of each datum's targets, one forward pass, no gradient (``PolicyClients.forward``)."""


async def loss_data(
    datums: Sequence[TrainingDatum], loss_fn: LossFn, forward: LearnerLogprobs
) -> list[tinker.Datum]:
    """What ``forward_backward`` takes for ``loss_fn``: each datum shaped by :func:`loss_datum`, and where
    the loss reads a logprob at every position (:attr:`LossFn.needs_learner_prompt_logprobs`, ``dro``) the
    prompt positions, which the sampler gave none for, hold the learner's own (one ``forward``), so the
    penalty pulls only sampled tokens towards the sampler, not the prompt towards probability 1."""
    data = [loss_datum(d, loss_fn) for d in datums]
    if not loss_fn.needs_learner_prompt_logprobs:
        return data
    current_D = await forward(data)
    out = []
    for training, datum, current_T in zip(datums, data, current_D, strict=True):
        sampled_T = training.mask_T != 0
        logprobs_T = np.where(sampled_T, training.sampler_logprobs_T, current_T).astype(np.float32)
        inputs = {**datum.loss_fn_inputs, "logprobs": tinker.TensorData.from_numpy(logprobs_T)}
        out.append(dataclasses.replace(datum, loss_fn_inputs=inputs))
    return out
