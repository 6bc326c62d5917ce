"""Harbor's task format as catalog envs: ``harbor/<name>`` (shipped) and ``harbor:PATH`` (any folder).

A Harbor task (Harbor 0.25 / Terminal-Bench 2.0) is a folder::

    instruction.md        what the agent is told
    task.toml             [metadata], [verifier] timeout_sec/env, [agent] timeout_sec, [solution] env,
                          [environment] build_timeout_sec/docker_image/cpus/memory_mb/storage_mb/gpus
    environment/          Harbor: a Dockerfile (or docker-compose.yaml) building the container
    tests/test.sh         the verifier: run after the agent, writes /logs/verifier/reward.txt (or .json)
    solution/solve.sh     the oracle

envsuite runs a task whose environment the sandbox's own system can meet: the host's ``/usr``
(Debian's coreutils, bash, python3, git, sqlite3, jq...) with no network. A task whose environment
needs an image (``environment/Dockerfile``, ``docker-compose.yaml``, ``docker_image``) or GPUs is
refused with that reason (:class:`HarborTaskError`; listed as unavailable), and so is one that names
in ``[metadata] requires`` (Harbor's metadata is free-form; this key is envsuite's) a program the
sandbox's system lacks. The starting files of a
Dockerfile-free task come from ``environment/files/`` (copied to the working directory, ``/app`` as in
Terminal-Bench's images) and ``environment/setup.sh`` (run there once): envsuite's convention for what
a Dockerfile's ``COPY`` and ``RUN`` would do.

Grading follows Harbor's verifier: after the episode, ``/tests``, ``/logs/verifier`` and ``/solution``
are removed inside the sandbox (whatever the agent left there), the task's ``tests/`` are copied to
``/tests``, ``bash /tests/test.sh`` runs from the working directory with ``[verifier].env`` within
``[verifier].timeout_sec``, and the reward is read from ``/logs/verifier/reward.txt`` (a number) or
``reward.json`` (``{"reward": x}``). A reward of 1 from a verifier that ran to its end (not killed by a
signal or a limit) passes; anything else, a missing or unreadable reward included, scores 0.

As in Harbor, the verifier runs in the agent's own workspace: a task whose tests run code the agent
wrote (import its module, run its script) trusts that code not to forge the reward file. envsuite's
procedural ``workspace/repo`` family does not: it grades in a fresh sandbox with a signed verdict.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsuite.core import EnvContext, ProbeExpectation, ToolCall
from envsuite.envs.tool_use import Score
from envsuite.envs.workspace._catalog import TASKS_DIR, declared_programs, missing_programs
from envsuite.envs.workspace._env import Attack, WorkspaceEnv, WorkspaceSetupError, WorkspaceTask, call
from envsuite.envs.workspace._limits import WorkspaceLimits
from envsuite.envs.workspace._session import WorkspaceSession
from envsuite.registration import EnvKind, EnvSpec
from envsuite.sandbox import Limits, SandboxError

WORKDIR = "/app"
"""Where the agent starts and ``test.sh`` runs (Terminal-Bench's images' ``WORKDIR``)."""
REWARD_DIR = "/logs/verifier"
MAX_VERIFIER_S = 600.0
"""The longest a verifier may run here, whatever ``task.toml`` asks."""
_IMAGE_FILES = ("environment/Dockerfile", "environment/docker-compose.yaml", "environment/docker-compose.yml")


class HarborTaskError(ValueError):
    """The folder is not a Harbor task, or its environment cannot be met by the sandbox (the reason)."""


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task folder, read and checked."""

    name: str
    path: Path
    instruction: str
    config: Mapping[str, Any]
    """``task.toml`` as parsed."""

    def section(self, name: str) -> Mapping[str, Any]:
        value = self.config.get(name)
        return value if isinstance(value, Mapping) else {}

    @property
    def verifier_timeout_s(self) -> float:
        return min(float(self.section("verifier").get("timeout_sec", 120.0)), MAX_VERIFIER_S)

    @property
    def verifier_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in dict(self.section("verifier").get("env") or {}).items()}

    @property
    def solution_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in dict(self.section("solution").get("env") or {}).items()}

    def limits(self) -> WorkspaceLimits:
        """The workspace limits ``[agent]`` and ``[environment]`` ask for (the defaults where silent)."""
        env, agent, default = self.section("environment"), self.section("agent"), WorkspaceLimits()
        memory = env.get("memory_mb")
        storage = env.get("storage_mb")
        wall = float(agent.get("timeout_sec", default.episode_wall_s))
        return dataclasses.replace(
            default,
            memory_mb=int(memory) if memory else default.memory_mb,
            disk_mb=min(int(storage), 4096) if storage else default.disk_mb,
            episode_wall_s=wall,
            episode_cpu_s=wall,
        )

    def files(self, folder: str) -> dict[str, bytes]:
        """Every regular file under ``folder`` of the task, by path relative to it."""
        root = self.path / folder
        if not root.is_dir():
            return {}
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()
        }


def load_harbor_task(path: str | Path) -> HarborTask:
    """Read a Harbor task folder; raises :class:`HarborTaskError` saying why it cannot run here."""
    folder = Path(path).expanduser().resolve()
    for needed in ("instruction.md", "task.toml", "tests/test.sh"):
        if not (folder / needed).is_file():
            raise HarborTaskError(f"{folder} is not a Harbor task: it has no {needed}")
    try:
        config = tomllib.loads((folder / "task.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise HarborTaskError(f"{folder}/task.toml is not valid TOML: {exc}") from None
    image = [name for name in _IMAGE_FILES if (folder / name).exists()]
    found = config.get("environment")
    environment: dict[str, Any] = found if isinstance(found, dict) else {}
    if image:
        raise HarborTaskError(
            f"{folder.name} needs a Docker build ({image[0]}); envsuite's sandbox runs the host's system "
            "without images: move its setup into environment/files/ and environment/setup.sh"
        )
    if environment.get("docker_image"):
        raise HarborTaskError(f"{folder.name} needs the Docker image {environment['docker_image']!r}")
    if int(environment.get("gpus", 0) or 0) > 0:
        raise HarborTaskError(f"{folder.name} needs {environment['gpus']} GPU(s); the sandbox has none")
    missing = missing_programs(declared_programs(folder))
    if missing:
        raise HarborTaskError(f"{folder.name} {missing}")
    instruction = (folder / "instruction.md").read_text(encoding="utf-8").strip()
    return HarborTask(folder.name, folder, instruction, config)


def shipped_tasks() -> list[str]:
    """Names of the Harbor tasks shipped with envsuite (catalog ids ``harbor/<name>``)."""
    return sorted(p.name for p in TASKS_DIR.iterdir() if (p / "task.toml").is_file())


def harbor_spec(env_id: str) -> EnvSpec:
    """The catalog spec of ``harbor:PATH``; a task the sandbox cannot run is listed unavailable, with why."""
    path = env_id.split(":", 1)[1].removesuffix("-v0")
    spec = EnvSpec(
        id=f"harbor:{path}",
        entry_point=HarborEnv,
        # Absolute, so a worker process started elsewhere (an executor, Ray) finds the same folder.
        kwargs={"task_dir": str(Path(path).expanduser().resolve())},
        kind=EnvKind.MULTI_TURN,
        reward_range=(-0.1, 1.0),
        max_turns=10,
        tags=("workspace", "agentic", "harbor"),
        family="workspace",
    )
    try:
        task = load_harbor_task(path)
    except HarborTaskError as exc:
        return dataclasses.replace(spec, unavailable=str(exc))
    return dataclasses.replace(spec, description=f"Harbor task {task.name} ({task.path})")


def _read_reward(session: WorkspaceSession) -> tuple[float | None, str]:
    """The verifier's reward (``reward.txt``, else ``reward.json``'s ``reward``), and where it came from."""
    for name in ("reward.txt", "reward.json"):
        try:
            text = session.read_text(f"{REWARD_DIR}/{name}").strip()
        except (OSError, SandboxError):
            continue
        try:
            value: Any = float(text) if name == "reward.txt" else json.loads(text)
        except ValueError:
            return None, f"{name} holds {text[:60]!r}, not a reward"
        if isinstance(value, dict):
            value = value.get("reward")
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value), f"{name}: {value:g}"
        return None, f"{name} holds {text[:60]!r}, not a reward"
    return None, "the verifier wrote no reward"


class HarborEnv(WorkspaceEnv):
    """One Harbor task as an episode (see the module docstring). The task is the same for every seed
    and split (a fixed task, as in Terminal-Bench); ``ctx.seed`` changes nothing."""

    def __init__(self, ctx: EnvContext, *, task_dir: str, **kwargs: Any) -> None:
        """``task_dir``: the task's folder (refused with :class:`HarborTaskError` if it cannot run)."""
        self.harbor = load_harbor_task(task_dir)
        kwargs.setdefault("limits", self.harbor.limits())
        kwargs.setdefault("workdir", WORKDIR)
        super().__init__(ctx, **kwargs)
        self.spec = WorkspaceTask(self.harbor.instruction, key=self.harbor.name)

    def prepare(self, session: WorkspaceSession) -> None:
        for path, data in self.harbor.files("environment/files").items():
            session.box.write_bytes(session.path(path), data, executable=path.endswith(".sh"))
        setup = self.harbor.path / "environment" / "setup.sh"
        if setup.is_file():
            session.box.write_bytes("/tmp/.harbor-setup.sh", setup.read_bytes())
            done = session.run_setup(
                "bash /tmp/.harbor-setup.sh; status=$?; rm -f /tmp/.harbor-setup.sh; exit $status"
            )
            if not done.ok:
                raise WorkspaceSetupError(
                    f"{self.harbor.name}: environment/setup.sh failed: {done.stderr[-300:]}"
                )

    def reference_calls(self) -> Sequence[ToolCall]:
        """The oracle: ``solution/`` written to ``/solution``, then ``bash /solution/solve.sh``."""
        solution = self.harbor.files("solution")
        if "solve.sh" not in solution:
            return []
        calls = [
            call("write_file", f"ref{i}", path=f"/solution/{name}", content=data.decode("utf-8"))
            for i, (name, data) in enumerate(solution.items())
        ]
        env = " ".join(f"{k}={_quote(v)}" for k, v in self.harbor.solution_env.items())
        return [*calls, call("bash", "refrun", command=f"{env} bash /solution/solve.sh".strip())]

    def attacks(self) -> Sequence[Attack]:
        forge = f"mkdir -p {REWARD_DIR} && echo 1 > {REWARD_DIR}/reward.txt"
        fake = "#!/bin/bash\nmkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt\n"
        return [
            Attack(
                "forge the reward file", [call("bash", "atk0", command=forge)], ProbeExpectation.NO_CREDIT
            ),
            Attack(
                "plant a test.sh",
                [call("write_file", "atk1", path="/tests/test.sh", content=fake)],
                ProbeExpectation.NO_CREDIT,
            ),
        ]

    def grade(self, session: WorkspaceSession) -> Score:
        reference = f"{self.harbor.name}: tests/test.sh writes reward 1"
        cleared = session.run_setup(
            f"rm -rf /tests {REWARD_DIR} /solution; mkdir -p {REWARD_DIR} /logs/agent && ! test -e /tests"
        )
        if not cleared.ok:
            return Score(
                False, reference, f"could not clear /tests and {REWARD_DIR}: {cleared.stderr[-200:]}"
            )
        try:
            for path, data in self.harbor.files("tests").items():
                session.box.write_bytes(f"/tests/{path}", data, executable=path.endswith(".sh"))
        except (OSError, SandboxError) as exc:
            return Score(False, reference, f"could not copy the tests in: {exc}")
        timeout = self.harbor.verifier_timeout_s
        limits = Limits(
            wall_s=timeout,
            cpu_s=timeout,
            memory_mb=self.limits.memory_mb,
            output_bytes=64 << 10,
            disk_mb=self.limits.disk_mb + 64,
        )
        env = {**session.env, **self.harbor.verifier_env}
        run = session.box.run(["bash", "/tests/test.sh"], cwd=session.workdir, env=env, limits=limits)
        reward, where = _read_reward(session)
        detail = f"{where}; test.sh exit {run.exit_code}" + (
            f" ({run.limit.value})" if run.limit.value != "none" else ""
        )
        # A verifier killed by a signal or a limit did not finish: a reward file it left is not its word
        # (code the agent wrote can kill test.sh after writing one).
        finished = run.limit.value == "none" and run.exit_code < 128
        return Score(finished and reward is not None and reward >= 1.0, reference, detail)


def _quote(value: str) -> str:
    return shlex.quote(value)
