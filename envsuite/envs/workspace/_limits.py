"""What one workspace command and one whole episode may use, and how each limit shows up to the model.

Per command (a shell line, a Python run): wall time, CPU time, memory, output bytes, file size; they are
:class:`envsuite.sandbox.Limits` fields, enforced by the sandbox. Per episode: the workspace's disk (the
session's scratch root, measured by the sandbox during every run), the total wall and CPU time of all
commands, and the number of commands. Every limit that ends a command or the episode is an
:class:`Outcome` the model reads in the tool result (never an exception).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from envsuite.sandbox import Limit, Limits


class Outcome(enum.StrEnum):
    """How one workspace call ended (``OK`` also for a command that exited non-zero by itself)."""

    OK = "ok"
    """The command ended by itself (its exit code is reported beside), or the file call succeeded."""
    WALL_TIME = "wall_time"
    """The command ran past its wall-clock limit and was killed with its whole process tree."""
    CPU_TIME = "cpu_time"
    """A process of the command used more than its CPU seconds."""
    MEMORY = "memory"
    """An allocation failed or the command's memory cgroup ran out."""
    PROCESSES = "processes"
    """A fork was refused (too many processes)."""
    FILE_SIZE = "file_size"
    """A file grew past the largest file the command may write."""
    OUTPUT = "output"
    """stdout or stderr passed the command's output bytes; the output is cut there, the command killed."""
    DISK = "disk"
    """The workspace grew past its disk quota; the command was killed."""
    EPISODE_TIME = "episode_time"
    """The episode's total wall or CPU time for commands is spent: nothing more runs; the episode ends."""
    EPISODE_COMMANDS = "episode_commands"
    """The episode's command budget is spent: nothing more runs; the episode ends."""
    REFUSED = "refused"
    """A file call was refused: a missing file, a path through a link or on a read-only mount, an
    ambiguous or absent edit target, content past the size limit."""

    @property
    def ends_episode(self) -> bool:
        return self in (Outcome.EPISODE_TIME, Outcome.EPISODE_COMMANDS)


_FROM_LIMIT = {
    Limit.NONE: Outcome.OK,
    Limit.WALL_TIME: Outcome.WALL_TIME,
    Limit.CPU_TIME: Outcome.CPU_TIME,
    Limit.MEMORY: Outcome.MEMORY,
    Limit.PROCESSES: Outcome.PROCESSES,
    Limit.FILE_SIZE: Outcome.FILE_SIZE,
    Limit.OUTPUT: Outcome.OUTPUT,
    Limit.DISK: Outcome.DISK,
}


def outcome_of(limit: Limit) -> Outcome:
    """The outcome a sandbox run's limit maps to."""
    return _FROM_LIMIT[limit]


@dataclass(frozen=True)
class WorkspaceLimits:
    """Limits of one workspace episode. Plain data; it pickles (it travels in group builders)."""

    command_wall_s: float = 20.0
    """Wall-clock seconds of one command."""
    command_cpu_s: float = 20.0
    """CPU seconds of each process of one command."""
    memory_mb: int = 1024
    """Memory of one command (per process, and the tree's where a cgroup is writable)."""
    processes: int = 64
    output_bytes: int = 16 << 10
    """Bytes kept of a command's stdout and of its stderr; past them the command ends (``OUTPUT``)."""
    file_size_mb: int = 16
    """Largest file a command may write, and the most ``write_file`` takes."""
    disk_mb: int = 128
    """The whole workspace's size on disk (what every command and file call left there)."""
    episode_wall_s: float = 120.0
    """Wall-clock seconds of all the episode's commands together."""
    episode_cpu_s: float = 120.0
    """CPU seconds of all the episode's commands together."""
    episode_commands: int = 40
    """Commands (shell and Python runs) an episode may make; file calls do not count."""

    def __post_init__(self) -> None:
        for name in ("command_wall_s", "command_cpu_s", "episode_wall_s", "episode_cpu_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"WorkspaceLimits.{name} must be > 0, got {getattr(self, name)}")
        if self.episode_commands < 1 or self.disk_mb < 1 or self.output_bytes < 1:
            raise ValueError("episode_commands, disk_mb and output_bytes must be >= 1")

    def command(self, wall_left_s: float, cpu_left_s: float) -> Limits:
        """The sandbox limits of the next command: the per-command ones, within what the episode has left."""
        return Limits(
            wall_s=max(0.05, min(self.command_wall_s, wall_left_s)),
            cpu_s=max(0.05, min(self.command_cpu_s, cpu_left_s)),
            memory_mb=self.memory_mb,
            processes=self.processes,
            file_size_mb=self.file_size_mb,
            output_bytes=self.output_bytes,
            disk_mb=self.disk_mb,
        )


@dataclass
class Usage:
    """What an episode's commands used so far."""

    commands: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def exhausted(self, limits: WorkspaceLimits) -> Outcome | None:
        """The episode limit that is spent, if one is."""
        if self.commands >= limits.episode_commands:
            return Outcome.EPISODE_COMMANDS
        if self.wall_s >= limits.episode_wall_s or self.cpu_s >= limits.episode_cpu_s:
            return Outcome.EPISODE_TIME
        return None
