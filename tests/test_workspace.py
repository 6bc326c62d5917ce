"""The workspace session (envsuite.envs.workspace): files that persist across turns, the five tools,
and every per-command and per-episode limit as an outcome the model reads. Real sandbox, real tools."""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest

from envsuite.core import ToolCall, run_tool_call
from envsuite.envs.workspace import Outcome, WorkspaceLimits, WorkspaceSession, workspace_tools
from tests.support.sandbox import needs_sandbox

pytestmark = needs_sandbox

SMALL = WorkspaceLimits(
    # Ordinary commands get time to spare on a loaded box; the limit tests set their own.
    command_wall_s=15.0,
    command_cpu_s=15.0,
    output_bytes=2000,
    disk_mb=8,
    episode_wall_s=120.0,
    episode_commands=40,
)


@pytest.fixture
def session() -> WorkspaceSession:
    with WorkspaceSession(SMALL) as s:
        yield s  # type: ignore[misc]


def test_files_and_state_persist_across_commands_and_tools(session: WorkspaceSession) -> None:
    assert session.run_shell("mkdir -p notes && echo first > notes/a.txt").ok
    assert session.run_python("open('notes/b.txt', 'w').write('second\\n')").ok
    listed = session.run_shell("cat notes/a.txt notes/b.txt; pwd")
    assert listed.ok and listed.text.endswith("[stdout]\nfirst\nsecond\n/work")
    assert session.write_file("src/m.py", "x = 1\ny = 2\n").ok
    assert session.run_python(
        "import sys; sys.path.insert(0, 'src'); import m; print(m.x + m.y)"
    ).text.endswith("3")
    assert session.usage.commands == 4


def test_read_file_shows_a_numbered_line_range(session: WorkspaceSession) -> None:
    session.write_file("big.txt", "".join(f"line {i}\n" for i in range(1, 301)))
    view = session.read_file("big.txt", 2, 3)
    assert view.ok and view.text == "    2\tline 2\n    3\tline 3\n(297 more lines; read from line 4)"
    whole = session.read_file("big.txt")
    assert whole.text.count("\n") == 200 and "(100 more lines; read from line 201)" in whole.text
    assert session.read_file("big.txt", 400).outcome is Outcome.REFUSED
    missing = session.read_file("nope.txt")
    assert missing.outcome is Outcome.REFUSED and "no such file" in missing.text


def test_edit_file_replaces_one_unique_match_only(session: WorkspaceSession) -> None:
    session.write_file("f.py", "a = 1\nb = 1\nc = 2\n")
    twice = session.edit_file("f.py", "= 1", "= 9")
    assert twice.outcome is Outcome.REFUSED and "found 2 times" in twice.text
    absent = session.edit_file("f.py", "zzz", "y")
    assert absent.outcome is Outcome.REFUSED and "not found" in absent.text
    done = session.edit_file("f.py", "b = 1", "b = 5")
    assert done.ok and "line 2" in done.text
    assert session.read_text("f.py") == "a = 1\nb = 5\nc = 2\n"


def test_paths_cannot_leave_the_sandbox_or_follow_links(session: WorkspaceSession) -> None:
    session.run_shell("ln -s /etc/hostname link && ln -s / root_link")
    assert session.write_file("/usr/bin/evil", "x").outcome is Outcome.REFUSED
    assert session.write_file("root_link/tmp/x", "x").outcome is Outcome.REFUSED
    # `..` stays inside the sandbox's root: this writes the sandbox's /etc-less /x, not the host's.
    assert session.write_file("../../../../x.txt", "inside").ok
    assert session.run_shell("cat /x.txt").text.endswith("inside")


@pytest.mark.parametrize(
    ("command", "outcome"),
    [
        ("sleep 30", Outcome.WALL_TIME),
        ("python3 -c 'while True: pass'", Outcome.CPU_TIME),
        ("yes", Outcome.OUTPUT),
        ("head -c 20000000 /dev/zero > fill.bin", Outcome.FILE_SIZE),
        ("python3 -c 'x = bytearray(1 << 30)'", Outcome.MEMORY),
        ("for i in $(seq 40); do sleep 5 & done; wait", Outcome.PROCESSES),
    ],
)
def test_each_command_limit_is_an_outcome_the_model_reads(command: str, outcome: Outcome) -> None:
    # The CPU case gets wall time to spare: on a loaded 2-core box a spinning process can take a
    # sixth of a core, and its 0.5 s of CPU must come before the wall clock ends it.
    spin = outcome is Outcome.CPU_TIME
    limits = WorkspaceLimits(
        command_wall_s=60.0 if spin else 2.0,
        command_cpu_s=0.5 if spin else 1.0,
        output_bytes=2000,
        file_size_mb=8,
        disk_mb=64,
        memory_mb=256,
        processes=16,
    )
    with WorkspaceSession(limits) as s:
        result = s.run_shell(command)
        assert result.outcome is outcome, result.text
        assert f"stopped ({outcome.value})" in result.text
        assert s.run_shell("echo still here").text.endswith("still here")


def test_the_disk_quota_covers_the_whole_workspace() -> None:
    limits = WorkspaceLimits(file_size_mb=6, disk_mb=8, command_wall_s=5.0)
    with WorkspaceSession(limits) as s:
        assert s.run_shell("head -c 5000000 /dev/zero > a.bin").ok
        filled = s.run_shell("head -c 5000000 /dev/zero > b.bin; sleep 2")
        assert filled.outcome is Outcome.DISK, filled.text


def test_episode_budgets_end_the_episode() -> None:
    with WorkspaceSession(WorkspaceLimits(episode_commands=2)) as s:
        assert s.run_shell("true").ok and s.run_python("pass").ok
        spent = s.run_shell("echo more")
        assert spent.outcome is Outcome.EPISODE_COMMANDS and spent.exit_code is None
        assert "2 commands" in spent.text and spent.outcome.ends_episode
        assert s.write_file("still.txt", "file calls do not count").ok
    with WorkspaceSession(WorkspaceLimits(command_wall_s=1.0, episode_wall_s=1.5)) as s:
        assert s.run_shell("sleep 5").outcome is Outcome.WALL_TIME
        second = s.run_shell("sleep 5")  # only what is left of the episode's 1.5 s
        left = re.search(r"past its ([0-9.]+) s wall-clock limit", second.text)
        assert second.outcome is Outcome.WALL_TIME and left is not None and float(left[1]) < 1.0
        assert s.run_shell("true").outcome is Outcome.EPISODE_TIME


def test_tools_run_through_the_tool_contract(session: WorkspaceSession) -> None:
    tools = workspace_tools(session)
    assert [t.name for t in tools] == ["bash", "python", "read_file", "write_file", "edit_file"]

    def run(name: str, **arguments: object) -> tuple[str, bool, bool]:
        outcome = asyncio.run(run_tool_call(tools, ToolCall.create(name, dict(arguments), "c1")))
        (message,) = outcome.messages
        assert message["tool_call_id"] == "c1" and message["name"] == name
        return message["content"], outcome.ok, outcome.should_stop

    assert run("write_file", path="a.txt", content="hello\n")[1]
    assert run("bash", command="cat a.txt")[0] == "exit code: 0\n[stdout]\nhello"
    text, ok, _ = run("edit_file", path="a.txt", old_string="nope", new_string="x")
    assert not ok and text.startswith("Error: no edit made to a.txt: not found")
    text, ok, _ = run("read_file", path="a.txt", start_line=1)
    assert ok and text == "    1\thello"
    assert run("python", code="import sys; sys.exit(3)")[0].startswith("exit code: 3")
    bad = asyncio.run(run_tool_call(tools, ToolCall.create("bash", {"cmd": "ls"}, "c2")))
    assert not bad.ok and "missing argument 'command'" in bad.messages[0]["content"]


@pytest.mark.parametrize("tool", ["git", "sqlite3", "jq"])
def test_debian_tools_work_inside_the_sandbox(session: WorkspaceSession, tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed here (`make install` installs it)")
    command = {
        "git": "git init -q r && cd r && echo x > f && git add f && git commit -qm one && git log --format=%s",
        "sqlite3": "sqlite3 d.db 'create table t(x); insert into t values (4), (5); select sum(x) from t;'",
        "jq": "echo '{\"a\": [1, 2, 3]}' | jq '.a | add'",
    }[tool]
    result = session.run_shell(command)
    assert result.ok, result.text
    assert result.text.endswith({"git": "one", "sqlite3": "9", "jq": "6"}[tool])


def test_git_commits_hash_the_same_in_every_session() -> None:
    hashes = set()
    for _ in range(2):
        with WorkspaceSession() as s:
            done = s.run_shell(
                "git init -q r && cd r && echo x > f && git add f && git commit -qm one && git rev-parse HEAD"
            )
            hashes.add(done.text.splitlines()[-1])
    assert len(hashes) == 1


def test_closing_removes_the_workspace() -> None:
    s = WorkspaceSession()
    root = s.box.root
    s.write_file("a.txt", "x")
    assert root.exists()
    s.close()
    s.close()
    assert not root.exists() and s.closed
