"""``sandbox="envsuite"``: an Inspect sandbox environment backed by :class:`envsuite.sandbox.Sandbox`.

Inspect finds it through envsuite's ``inspect_ai`` entry point (``envsuite.evals._registry``), so any
task's ``sandbox="envsuite"`` runs Inspect's ``bash()`` and ``python()`` tools offline: no Docker, no
network inside, a private scratch root per sample (files persist between the sample's tool calls and
vanish at cleanup), every limit of :class:`~envsuite.sandbox.Limits` enforced. Settings go in an
:class:`EnvsuiteSandboxConfig` (``sandbox=("envsuite", EnvsuiteSandboxConfig(memory_mb=2048))``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, overload

from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    sandboxenv,
)
from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError
from pydantic import BaseModel

from envsuite.sandbox import (
    SANDBOX_WORKDIR,
    Isolation,
    Limit,
    Limits,
    Sandbox,
    SandboxConfig,
)

_USERS = (None, "sandbox", "1000")
"""The one user a command can run as (``sandbox``, uid 1000 inside)."""


class EnvsuiteSandboxConfig(BaseModel, frozen=True):
    """Per-task settings of ``sandbox="envsuite"``; a tool call's ``timeout`` overrides the times."""

    wall_s: float = 180.0
    cpu_s: float = 180.0
    memory_mb: int = 2048
    processes: int = 128
    output_bytes: int = 10 << 20
    """Inspect's own default exec output limit (10 MiB)."""
    disk_mb: int = 1024
    unisolated: bool = False
    """Explicit opt-in to run without bubblewrap (every result says ``isolated=False`` in envsuite's logs)."""

    def sandbox_config(self) -> SandboxConfig:
        limits = Limits(
            wall_s=self.wall_s,
            cpu_s=self.cpu_s,
            memory_mb=self.memory_mb,
            processes=self.processes,
            output_bytes=self.output_bytes,
            disk_mb=self.disk_mb,
            file_size_mb=min(self.disk_mb, 1024),
        )
        return SandboxConfig(limits=limits, isolation=Isolation.NONE if self.unisolated else Isolation.BWRAP)


def _settings(config: SandboxEnvironmentConfigType | None) -> EnvsuiteSandboxConfig:
    if config is None:
        return EnvsuiteSandboxConfig()
    if isinstance(config, EnvsuiteSandboxConfig):
        return config
    if isinstance(config, BaseModel):
        return EnvsuiteSandboxConfig(**config.model_dump())
    raise ValueError(
        f"sandbox 'envsuite' takes an EnvsuiteSandboxConfig, not {config!r} (it needs no compose file)"
    )


@sandboxenv(name="envsuite")
class EnvsuiteSandboxEnvironment(SandboxEnvironment):
    """One sample's sandbox: commands, files, cleanup."""

    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__()
        self.sandbox = sandbox

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return EnvsuiteSandboxConfig(**config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        sandbox = await asyncio.to_thread(Sandbox, _settings(config).sandbox_config())
        return {"default": cls(sandbox)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            await environment.as_type(EnvsuiteSandboxEnvironment).sandbox.cleanup()

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if user not in _USERS:
            raise SandboxUserUnsupportedError(
                f"sandbox 'envsuite' runs commands as 'sandbox' only, not {user!r}"
            )
        limits = self.sandbox.config.limits
        if timeout is not None:
            limits = limits.with_time(timeout)
        result = await self.sandbox.run_async(
            cmd, stdin=input, cwd=cwd or SANDBOX_WORKDIR, env=env, limits=limits
        )
        if timeout is not None and result.limit in (Limit.WALL_TIME, Limit.CPU_TIME):
            raise TimeoutError(f"command timed out after {timeout} s ({result.limit.value})")
        return ExecResult(
            success=result.ok, returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        await asyncio.to_thread(self.sandbox.write_bytes, file, data)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        data = await asyncio.to_thread(self.sandbox.read_bytes, file, limit + 1)
        if len(data) > limit:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None
            )
        if not text:
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnicodeDecodeError(
                exc.encoding, exc.object, exc.start, exc.end, f"{file}: {exc.reason}"
            ) from None

    def default_polling_interval(self) -> float:
        return 0.2
