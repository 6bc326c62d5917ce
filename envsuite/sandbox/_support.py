"""Can this machine isolate? Find bubblewrap and prlimit, run one tiny sandbox, look for cgroups.

The answer is cached per process and per (isolation, host uid, cgroups) setting: the probe runs one
``bwrap ... /usr/bin/true`` (about 10 ms) the first time a sandbox is made.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envsuite.sandbox._cgroup import CgroupKind, CgroupSupport, probe_cgroups
from envsuite.sandbox._layout import bwrap_argv, make_root
from envsuite.sandbox._types import (
    ISOLATION_ENV_VAR,
    Isolation,
    Limits,
    SandboxConfig,
    SandboxUnavailableError,
)

_PROBE_TIMEOUT_S = 30.0
_OPT_IN = (
    f"To run without isolation anyway (the program then sees this machine's files and network), opt in "
    f"explicitly: SandboxConfig(isolation='none'), `envsuite serve-sandbox --unisolated`, or "
    f"{ISOLATION_ENV_VAR}=none."
)


@dataclass(frozen=True)
class SandboxSupport:
    """What runs on this machine will use."""

    isolation: Isolation
    bwrap: str | None
    """Path of bubblewrap (None for unisolated runs)."""
    prlimit: str
    """Path of util-linux's prlimit, which sets the rlimits."""
    run_as: int | None
    """Host uid to drop to before starting bwrap (when envsuite runs as root), else None."""
    cgroups: CgroupSupport

    def describe(self) -> str:
        """One line for logs and ``envsuite serve-sandbox``."""
        who = f"host uid {self.run_as}" if self.run_as is not None else f"host uid {os.geteuid()}"
        cgroup = (
            f"cgroup {self.cgroups.kind.value}"
            if self.cgroups.kind is not CgroupKind.NONE
            else "rlimits only"
        )
        if self.isolation is Isolation.NONE:
            return f"UNISOLATED (explicit opt-in), prlimit, {cgroup}, {who}"
        return f"bubblewrap {self.bwrap}, prlimit, {cgroup}, {who}"


def sandbox_support(config: SandboxConfig) -> SandboxSupport:
    """The support for ``config`` (cached); raises :class:`SandboxUnavailableError` saying what is missing."""
    return _support(config.isolation, config.host_uid, config.cgroups, config.scratch_parent, config.bwrap)


@functools.lru_cache(maxsize=8)
def _support(
    isolation: Isolation, host_uid: int, cgroups: bool, scratch_parent: str | None, bwrap_name: str
) -> SandboxSupport:
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin")
    if prlimit is None:
        raise SandboxUnavailableError(
            "util-linux's prlimit is missing (/usr/bin/prlimit); it sets the sandbox's kernel limits"
        )
    run_as = host_uid if os.geteuid() == 0 else None
    cgroup = probe_cgroups() if cgroups else CgroupSupport(CgroupKind.NONE, reason="disabled by config")
    if isolation is Isolation.NONE:
        return SandboxSupport(Isolation.NONE, None, prlimit, run_as, cgroup)
    bwrap = shutil.which(bwrap_name, path="/usr/bin:/bin:/usr/local/bin")
    if bwrap is None:
        raise SandboxUnavailableError(
            f"bubblewrap is not installed (no {bwrap_name}): install Debian's `bubblewrap` package "
            "(`make install` does, or `apt-get install bubblewrap`). " + _OPT_IN
        )
    _probe_bwrap(bwrap, run_as, scratch_parent)
    return SandboxSupport(Isolation.BWRAP, bwrap, prlimit, run_as, cgroup)


def _probe_bwrap(bwrap: str, run_as: int | None, scratch_parent: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="envsuite-sandbox-probe-", dir=scratch_parent) as tmp:
        root = Path(tmp) / "root"
        make_root(root, run_as)
        argv = bwrap_argv(bwrap, root, limits=Limits(), env={}, cwd="/", sync_fds=None)
        try:
            done = subprocess.run(
                [*argv, "/usr/bin/true"],
                capture_output=True,
                env={},
                timeout=_PROBE_TIMEOUT_S,
                user=run_as,
                group=run_as,
                extra_groups=[] if run_as is not None else None,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailableError(f"bubblewrap could not start: {exc}. {_OPT_IN}") from exc
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
        raise SandboxUnavailableError(
            f"bubblewrap cannot make a sandbox here: {why}. Unprivileged user namespaces must be "
            "allowed (sysctl kernel.unprivileged_userns_clone=1 on older Debian kernels; "
            "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap on "
            f"Ubuntu 24.04+; user.max_user_namespaces > 0). {_OPT_IN}"
        )
