"""Capture: outside agents' calls to ``envsuite serve``'s OpenAI routes, kept as training data.

A request is captured when it names a capture set (``X-Envsuite-Capture: NAME``) or carries one of
the server's capture keys. Every captured call is stored with its exact prompt and sampled token ids
and logprobs (:class:`CapturedCall`), grouped into episodes by the client's ``X-Envsuite-Episode`` id
or, without one, by threading: a chat request that repeats an earlier reply continues that reply's
episode. An episode is scored by a posted reward or by a catalog env's grader (:func:`grade_episode`),
and ``envsuite train --captured DIR`` trains on the scored episodes as on its own rollouts
(:func:`captured_groups`). docs/serve.md, "Capture", has the whole picture.
"""

from envsuite.capture._grading import grade_episode
from envsuite.capture._records import (
    CAPTURE_NAME_PATTERN,
    EPISODE_ID_PATTERN,
    CapturedCall,
    CapturedChoice,
    CapturedEpisode,
    EpisodeScore,
    conversation_key,
)
from envsuite.capture._store import CaptureSets, CaptureStore, ThreadLink, UnknownEpisodeError, check_id
from envsuite.capture._training import CapturedGroups, captured_groups, episode_trajectories

__all__ = [
    # records
    "CapturedCall",
    "CapturedChoice",
    "CapturedEpisode",
    "EpisodeScore",
    "conversation_key",
    # storage
    "CAPTURE_NAME_PATTERN",
    "EPISODE_ID_PATTERN",
    "CaptureSets",
    "CaptureStore",
    "ThreadLink",
    "UnknownEpisodeError",
    "check_id",
    # scoring and training
    "CapturedGroups",
    "captured_groups",
    "episode_trajectories",
    "grade_episode",
]
