"""Readable transcripts of sampled episodes (markdown), decoded with the policy's tokenizer.

Model output is data: it sits in fences longer than any backtick run in it, and control characters
(ESC sequences, bidi overrides) are written as visible escapes, so ``cat``-ing a transcript in a terminal
or opening it in an editor shows the text rather than obeying it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envsuite.core import Trajectory, TrajectoryGroup
from envsuite.display import printable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def _fenced(text: str) -> str:
    """A code block whose fence is longer than any backtick run in ``text`` (model output is data)."""
    text = printable(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def render_trajectory(trajectory: Trajectory, tokenizer: PreTrainedTokenizerBase, title: str) -> str:
    """One episode: for each turn the new observation tokens, the sampled reply, reward and logs."""
    lines = [f"# {title}", ""]
    seen: list[int] = []
    for turn, transition in enumerate(trajectory.transitions):
        ob = transition.ob.to_ints()
        new = ob[len(seen) :] if ob[: len(seen)] == seen else ob
        action = list(transition.ac.tokens)
        lines += [
            f"## Turn {turn}",
            "",
            "**Observation** (new tokens):",
            "",
            _fenced(str(tokenizer.decode(new))),
            "",
        ]
        lines += ["**Policy reply:**", "", _fenced(str(tokenizer.decode(action))), ""]
        lines.append(
            f"reward {transition.reward:+.3f}"
            + (f", stop: {transition.stop_reason}" if transition.stop_reason else "")
        )
        for key, value in transition.logs.items():
            lines.append(f"- {key}: {_one_line(str(value))}")
        lines.append("")
        seen = ob + action
    return "\n".join(lines)


def _one_line(text: str) -> str:
    return printable(text.replace("\n", "\\n")[:500])


def write_transcripts(
    groups: Sequence[TrajectoryGroup],
    tokenizer: PreTrainedTokenizerBase,
    out_dir: Path,
    step: int,
    limit: int,
    *,
    prefix: str = "",
    indices_P: Sequence[int] | None = None,
) -> list[Path]:
    """Write up to ``limit`` episodes of a step (one per group first, so they show different problems).

    ``prefix`` starts each file name (``test_`` for held-out episodes); ``indices_P`` numbers the
    groups by their place in the batch (default: their order here), so the same problem keeps its
    file name from one evaluation to the next.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    picked: list[tuple[int, int, Trajectory, float]] = []
    for member in range(max((len(g.trajectories_G) for g in groups), default=0)):
        for g_index, group in enumerate(groups):
            if member < len(group.trajectories_G) and len(picked) < limit:
                picked.append(
                    (g_index, member, group.trajectories_G[member], group.get_total_rewards()[member])
                )
    paths = []
    for g_index, member, trajectory, total in picked:
        number = indices_P[g_index] if indices_P is not None else g_index
        path = out_dir / f"{prefix}step{step:05d}_group{number:02d}_member{member:02d}.md"
        kind = "held-out " if prefix.startswith("test") else ""
        title = f"{kind}step {step}, group {number}, member {member}: return {total:+.3f}"
        path.write_text(render_trajectory(trajectory, tokenizer, title), encoding="utf-8")
        paths.append(path)
    return paths
