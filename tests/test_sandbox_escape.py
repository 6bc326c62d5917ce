"""The escape and abuse suite: every way out we could think of, each contained and reported.

Each case runs a real program in a real bubblewrap sandbox on this machine and checks three things:
what the program could do (nothing outside), which :class:`Limit` the result names, and that the host
is unchanged afterwards (no process left behind, no cgroup left behind, host files untouched).
The Makefile installs Debian's bubblewrap; without it these tests skip saying why.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envsuite.sandbox import (
    CgroupKind,
    Isolation,
    Limit,
    Limits,
    RunResult,
    Sandbox,
    SandboxConfig,
    SandboxPathError,
    SandboxUnavailableError,
    live_cgroups,
)
from tests.support.sandbox import SUPPORT, needs_sandbox

REPO = Path(__file__).resolve().parents[1]
FAST = Limits(wall_s=5, cpu_s=5, memory_mb=256, processes=16, file_size_mb=1, output_bytes=4096, disk_mb=8)
"""Tight limits so that every abuse case ends in well under a second of the program's own time."""

pytestmark = needs_sandbox


def _processes_rooted_at(root: tuple[int, int]) -> set[int]:
    """Host pids whose root directory is the sandbox's scratch root (``(st_dev, st_ino)``): its processes
    and no one else's (other sandboxes on the machine, a training run's graders, have their own roots)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                st = os.stat(f"/proc/{entry}/root")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == root:
                found.add(int(entry))
    return found


@pytest.fixture
def box() -> Iterator[Sandbox]:
    """A fresh sandbox; afterwards the host must hold no process and no cgroup of it."""
    sandbox = Sandbox()
    root = sandbox.root
    st = os.stat(root)
    yield sandbox
    sandbox.close()
    assert not root.exists(), "the scratch dir outlived the sandbox"
    deadline = time.monotonic() + 5
    while (left := _processes_rooted_at((st.st_dev, st.st_ino))) or live_cgroups():
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"sandbox processes left on the host: {left}"
    assert not live_cgroups(), f"a run's cgroup was left behind: {live_cgroups()}"


def _py(box: Sandbox, code: str, **limits: float | int) -> RunResult:
    return box.run_python(code, limits=Limits(**(FAST.to_dict() | limits)))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Network: TCP, UDP, DNS, unix sockets to the host
# --------------------------------------------------------------------------------------------------


def test_tcp_to_the_host_and_the_internet_is_unreachable(box: Sandbox) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.3)
        port = server.getsockname()[1]
        result = _py(
            box,
            f"""
import socket
for addr in [("127.0.0.1", {port}), ("1.1.1.1", 80), ("10.0.0.1", 22)]:
    try:
        socket.create_connection(addr, timeout=1).close()
        print("CONNECTED", addr)
    except OSError as exc:
        print("blocked", addr, exc.errno)
""",
        )
        with pytest.raises(TimeoutError):
            server.accept()  # nothing ever reached the host's listener
    assert result.ok and result.isolated
    assert "CONNECTED" not in result.stdout and result.stdout.count("blocked") == 3


def test_udp_and_dns_go_nowhere(box: Sandbox) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(0.3)
        port = server.getsockname()[1]
        result = _py(
            box,
            f"""
import socket, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for addr in [("127.0.0.1", {port}), ("8.8.8.8", 53)]:
    try:
        s.sendto(b"escape", addr)
        print("sent", addr)
    except OSError as exc:
        print("blocked", exc.errno)
try:
    print("RESOLVED", socket.getaddrinfo("example.com", 80))
except OSError as exc:
    print("dns failed", exc)
print("resolv.conf", os.path.exists("/etc/resolv.conf"))
""",
        )
        with pytest.raises(TimeoutError):
            server.recvfrom(100)  # the datagram went to the sandbox's own loopback, not ours
    assert result.ok
    assert "RESOLVED" not in result.stdout and "dns failed" in result.stdout
    assert "resolv.conf False" in result.stdout and "blocked" in result.stdout  # 8.8.8.8: no route


def test_unix_sockets_of_the_host_cannot_be_reached(box: Sandbox, tmp_path: Path) -> None:
    path = tmp_path / "host.sock"
    abstract = f"\0envsuite-escape-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX) as by_path, socket.socket(socket.AF_UNIX) as by_name:
        by_path.bind(str(path))
        by_name.bind(abstract)
        for server in (by_path, by_name):
            server.listen()
            server.settimeout(0.2)
        result = _py(
            box,
            f"""
import socket
for addr in [{str(path)!r}, {abstract!r}, "/run/systemd/private", "/var/run/docker.sock"]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(addr)
        print("CONNECTED", repr(addr))
    except OSError as exc:
        print("blocked", exc.errno)
""",
        )
        for server in (by_path, by_name):
            with pytest.raises(TimeoutError):
                server.accept()
    assert result.ok and "CONNECTED" not in result.stdout and result.stdout.count("blocked") == 4


# --------------------------------------------------------------------------------------------------
# Host files: reading, writing, and the host-side file API's symlink and `..` tricks
# --------------------------------------------------------------------------------------------------


def test_host_files_are_not_visible(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"envsuite-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("ENVSUITE_TEST_SECRET", secret)
    targets = [
        "/etc/shadow",
        str(REPO / "README.md"),
        str(REPO / ".git" / "HEAD"),
        "/root",
        f"/proc/{os.getpid()}/environ",
    ]
    result = _py(
        box,
        f"""
import os
for path in {targets!r}:
    try:
        open(path, "rb").read()
        print("OPENED", path)
    except OSError as exc:
        print("blocked", path, exc.errno)
print("pid1", open("/proc/1/cmdline", "rb").read().split(b"\\0")[0])
print("environ1", open("/proc/1/environ", "rb").read())
print("visible pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
""",
    )
    assert result.ok, result.stderr
    assert "OPENED" not in result.stdout and result.stdout.count("blocked") == len(targets)
    assert "pid1 b'/bin/sh'" in result.stdout  # the sandbox's own init, not the host's
    assert secret not in result.stdout
    assert "visible pids [1, 2]" in result.stdout  # its own init and itself, nothing of the host


def test_writing_outside_the_scratch_dir_changes_nothing_on_the_host(box: Sandbox, tmp_path: Path) -> None:
    host_file = tmp_path / "host.txt"
    host_file.write_text("original")
    marker = f"/tmp/envsuite-escape-{uuid.uuid4().hex}"
    result = _py(
        box,
        f"""
import os
for path in ["/usr/bin/escape", "/etc/passwd", "/usr/lib/escape", {str(host_file)!r}, {marker!r}]:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("pwned")
        print("wrote", path)
    except OSError as exc:
        print("blocked", path, exc.errno)
""",
    )
    assert result.ok, result.stderr
    assert result.stdout.count("blocked") == 3  # the system mounts are read-only
    # The two host paths were written inside the sandbox's own root, not on the host.
    assert host_file.read_text() == "original" and not Path(marker).exists()
    assert not Path("/usr/bin/escape").exists() and "pwned" not in Path("/etc/passwd").read_text()
    assert (box.root / host_file.relative_to("/")).read_text() == "pwned"


def test_the_file_api_refuses_symlink_and_dotdot_tricks(box: Sandbox, tmp_path: Path) -> None:
    host_secret = tmp_path / "secret.txt"
    host_secret.write_text("host secret")
    made = box.run_shell(
        f"ln -s {host_secret} /work/to_host && ln -s /etc /work/etc_dir && ln -s / /work/root_dir "
        "&& mkfifo /work/fifo && mkdir -p /work/sub",
        limits=FAST,
    )
    assert made.ok, made.stderr
    # Reading through a link is done in the sandbox's view, where the host file does not exist.
    with pytest.raises(FileNotFoundError):
        box.read_bytes("to_host")
    with pytest.raises(SandboxPathError):
        box.read_bytes("fifo")  # refused without blocking on the FIFO
    # Writes never follow links and never leave the scratch root.
    for path in ("to_host", "etc_dir/passwd", "root_dir/tmp/x", "../etc/passwd", "/usr/bin/x"):
        with pytest.raises(SandboxPathError):
            box.write_bytes(path, b"pwned")
    box.write_bytes("../../../../tmp/dotdot.txt", b"stays inside")
    assert (box.root / "tmp" / "dotdot.txt").read_bytes() == b"stays inside"
    assert host_secret.read_text() == "host secret" and not Path("/tmp/dotdot.txt").exists()
    assert "pwned" not in Path("/etc/passwd").read_text()


# --------------------------------------------------------------------------------------------------
# Resource abuse: each ends on the limit it hit
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bomb",
    [
        # The shell stays (sleep) until the clock: with `wait` it returned once its first pipeline had
        # forked and exited, which under load could be before the bomb reached the process limit (the
        # run then ended clean, the rest of the tree killed with the sandbox).
        pytest.param(["bash", "-c", ":(){ :|:& };:; sleep 10"], id="bash"),
        pytest.param(["/usr/bin/python3", "-c", "import os\nwhile True:\n    os.fork()"], id="python"),
    ],
)
def test_fork_bombs_hit_the_process_limit(box: Sandbox, bomb: list[str]) -> None:
    result = box.run(bomb, limits=FAST.with_time(3))
    assert result.limit is Limit.PROCESSES, result


def test_memory_bombs_hit_the_memory_limit(box: Sandbox) -> None:
    result = _py(box, "x = bytearray(8 * 1024**3)")
    assert result.limit is Limit.MEMORY and result.exit_code != 0
    growing = _py(box, "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))")
    assert growing.limit is Limit.MEMORY


@pytest.mark.skipif(
    SUPPORT is None or SUPPORT.cgroups.kind is CgroupKind.NONE, reason="needs a writable cgroup"
)
def test_a_tree_of_memory_hogs_is_stopped_by_the_cgroup(box: Sandbox) -> None:
    # Each child stays under its own address-space limit; together they pass the cgroup's.
    code = """
import os
children = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        block = bytearray(180 * 1024**2)
        for i in range(0, len(block), 4096):
            block[i] = 1
        os._exit(0)
    children.append(pid)
died = sum(os.waitpid(pid, 0)[1] != 0 for pid in children)
raise SystemExit(f"{died} children died")
"""
    result = _py(box, code, wall_s=20)
    assert result.limit is Limit.MEMORY, result


def test_endless_output_is_cut_at_the_output_limit(box: Sandbox) -> None:
    result = _py(box, "while True:\n    print('x' * 1000)")
    assert result.limit is Limit.OUTPUT and result.truncated
    assert len(result.stdout) == FAST.output_bytes


def test_sleeping_forever_hits_the_wall_clock(box: Sandbox) -> None:
    result = _py(box, "import time\ntime.sleep(10**6)", wall_s=1)
    assert result.limit is Limit.WALL_TIME and 0.9 < result.wall_s < 5
    blocked = box.run_shell("cat", limits=FAST.with_time(1))  # waits on stdin forever: none is given
    assert blocked.limit is Limit.NONE  # stdin is /dev/null: cat ends at once


def test_spinning_hits_the_cpu_limit(box: Sandbox) -> None:
    result = _py(box, "while True:\n    pass", cpu_s=1, wall_s=60)
    # rusage samples CPU time coarser than the kernel enforces it (0.8-0.9 s measured at a 1 s limit here).
    assert result.limit is Limit.CPU_TIME and result.cpu_s >= 0.5


def test_big_files_and_a_full_scratch_dir_hit_their_limits(box: Sandbox) -> None:
    big = _py(box, "open('/tmp/big', 'wb').write(b'x' * (4 << 20))")
    assert big.limit is Limit.FILE_SIZE
    code = "import time\nfor i in range(64):\n    open(f'/work/f{i}', 'wb').write(b'x' * (900 << 10))\ntime.sleep(30)"
    full = _py(box, code, wall_s=20)
    assert full.limit is Limit.DISK
    shm = _py(box, "for i in range(64):\n    open(f'/dev/shm/f{i}', 'wb').write(b'x' * (900 << 10))")
    assert shm.limit is Limit.DISK  # the tmpfs is capped at the disk limit too


# --------------------------------------------------------------------------------------------------
# The process boundary: signals, descriptors, environment, privileges
# --------------------------------------------------------------------------------------------------


def test_signals_cannot_reach_the_parent_or_host_processes(box: Sandbox) -> None:
    assert SUPPORT is not None
    uid = SUPPORT.run_as
    # A host process of the very uid the sandbox runs as: the most a signal could hope to reach.
    canary = subprocess.Popen(
        ["sleep", "60"], user=uid, group=uid, extra_groups=[] if uid is not None else None
    )
    try:
        result = _py(
            box,
            f"""
import os, signal
for target in [os.getppid(), {canary.pid}, {os.getpid()}, -1]:
    try:
        os.kill(target, signal.SIGKILL)
        print("signalled", target)
    except OSError as exc:
        print("blocked", target, exc.errno)
""",
        )
        time.sleep(0.1)
        assert canary.poll() is None, "the sandbox killed a host process"
        # kill(-1) reaches only the sandbox's own processes (itself included): a defined outcome.
        assert result.exit_code in (0, 137), result
        assert (
            f"signalled {canary.pid}" not in result.stdout and f"signalled {os.getpid()}" not in result.stdout
        )
    finally:
        canary.kill()
        canary.wait()
    assert os.getppid() > 1  # and this test process is alive to say so


def test_no_descriptor_leaks_in(box: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        result = _py(
            box,
            f"""
import os
print(sorted(int(x) for x in os.listdir("/proc/self/fd")))
try:
    print("READ", os.read({fd}, 100))
except OSError as exc:
    print("blocked", exc.errno)
""",
        )
    finally:
        os.close(fd)
    assert result.ok
    assert result.stdout.splitlines()[0] in ("[0, 1, 2, 3]", "[0, 1, 2]")  # 3: the listing's own
    assert "READ" not in result.stdout and "host secret" not in result.stdout


def test_no_secret_reaches_the_environment(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    for name in ("TINKER_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "ENVSUITE_TEST_SECRET"):
        monkeypatch.setenv(name, secret)
    result = box.run_shell("env; cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'", limits=FAST)
    assert result.ok and "PATH=" in result.stdout
    assert secret not in result.stdout and "API_KEY" not in result.stdout


def test_no_privileges_inside(box: Sandbox) -> None:
    result = box.run_shell(
        "id -u; grep CapEff /proc/self/status; unshare -r true && echo USERNS; "
        "mount -t tmpfs none /work 2>/dev/null && echo MOUNTED; hostname",
        limits=FAST,
    )
    assert result.stdout.splitlines()[:2] == ["1000", "CapEff:\t0000000000000000"]
    assert "USERNS" not in result.stdout and "MOUNTED" not in result.stdout and "sandbox" in result.stdout


def test_the_sandbox_runs_ordinary_programs(box: Sandbox) -> None:
    """The abuse cases above are not passing because nothing runs at all."""
    result = box.run_python("import json, sys\nprint(json.dumps(sys.stdin.read().split()))", stdin="a b c")
    assert result.ok and result.stdout == '["a", "b", "c"]\n' and result.limit is Limit.NONE
    assert result.isolated and result.wall_s > 0 and result.cpu_s > 0
    numpy = box.run_python("import numpy\nprint(numpy.arange(3).sum())")
    assert numpy.stdout == "3\n", numpy.stderr  # Debian's python3-numpy, for cookbook's graders
    assert sys.platform == "linux"


# --------------------------------------------------------------------------------------------------
# Without bubblewrap: a clear refusal, or an explicit opt-in that every result marks
# --------------------------------------------------------------------------------------------------


def test_no_bubblewrap_means_a_clear_refusal_unless_unisolated_runs_are_chosen(tmp_path: Path) -> None:
    missing = SandboxConfig(bwrap=str(tmp_path / "no-bwrap-here"))
    with pytest.raises(SandboxUnavailableError, match=r"bubblewrap is not installed.*isolation='none'"):
        Sandbox(missing)
    with Sandbox(SandboxConfig(bwrap=missing.bwrap, isolation=Isolation.NONE)) as box:
        assert not box.isolated
        result = box.run_python("print(2 + 2)")
        assert (result.stdout, result.isolated) == ("4\n", False)
        assert box.run_shell("yes", limits=FAST).limit is Limit.OUTPUT  # the runner's limits still hold
        assert box.run_python("x = bytearray(8 * 1024**3)", limits=FAST).limit is Limit.MEMORY
        assert "API_KEY" not in box.run_shell("env", limits=FAST).stdout  # still nothing inherited
