"""``workspace/shell``: files, CSV/JSON/log wrangling, text processing and small sqlite queries.

Each seed writes a few data files (a web server's log, a CSV of sales, a JSON list of users, an sqlite
database of orders) with seeded contents, and draws one task of the rung's kinds:

* rung 0: ``count_errors`` (lines of level ERROR in the log, to ``answer.txt``), ``csv_sum`` (the
  total of a CSV column, to ``answer.txt``);
* rung 1: ``json_filter`` (names of users over an age, sorted, one a line, to ``out.txt``),
  ``sqlite_totals`` (each customer's total from ``orders.db``, as ``customer,total`` lines sorted by
  customer, to ``out.csv``);
* the intro kinds (``workspace/shell_intro``, below rung 0: one command each, close to the worked call
  the env shows first): ``line_count``, ``word_count``, ``first_line``, ``last_line``, ``grep_count``
  (lines of a file containing a string), ``write_text`` (a given text to a given file);
* rung 2: ``script`` (write ``count.sh`` printing the number of a given level's lines in the log file
  named as its first argument): graded by running the script in a fresh sandbox on logs the agent never
  saw, so writing the visible log's count is not the work.

The hidden check reads the output (or runs the script) after the episode and compares with what the
env computed from the data; it also requires the input files unchanged, so rewriting the input to make
an easy answer does not pass. Expected values never enter the workspace.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from envsuite.core import EnvContext, Message, ToolCall
from envsuite.envs._problem import draw_for_split
from envsuite.envs.tool_use import Score
from envsuite.envs.workspace._env import Attack, WorkspaceEnv, WorkspaceTask, call
from envsuite.envs.workspace._session import WorkspaceSession
from envsuite.sandbox import Limits, Sandbox, SandboxError

RUNGS: dict[int, tuple[str, ...]] = {
    0: ("count_errors", "csv_sum"),
    1: ("json_filter", "sqlite_totals"),
    2: ("script",),
}
INTRO_KINDS = ("line_count", "word_count", "first_line", "last_line", "grep_count", "write_text")
"""``workspace/shell_intro``'s kinds: one shell command does each (``wc -l <``, ``head -n 1``, ...)."""
_OUTPUTS = ("answer.txt", "out.txt", "result.txt")
_INTRO_EXAMPLES = (
    ("Write the number of lines of notes.txt to count.txt.", "wc -l < notes.txt > count.txt"),
    ("Write the first line of todo.txt to top.txt.", "head -n 1 todo.txt > top.txt"),
    (
        "Write the number of lines of todo.txt that contain 'milk' to milk.txt.",
        "grep -c milk todo.txt > milk.txt",
    ),
)
"""The intro rung's worked examples (files not in any workspace): three of the six kinds are shown, the
other three (``wc -w``, ``tail -n 1``, ``echo``) are left to generalize to."""
_WORDS = ("amber", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "juniper")
_LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
_PATHS = ("/", "/login", "/cart", "/api/items", "/api/users", "/search", "/checkout")
_NAMES = (
    "ada", "bo", "cyd", "dev", "eli", "fay", "gus", "hal", "ida", "jo", "kai", "lou", "max", "ned",
    "oli", "pia", "quin", "rae", "sol", "tam", "uma", "val", "wes", "xan", "yul", "zed",
)  # fmt: skip
_PRODUCTS = ("apple", "bread", "chair", "desk", "eraser", "fork", "globe", "hat")
_DB_SCRIPT = """import json, sqlite3
rows = json.load(open(".orders.json"))
db = sqlite3.connect("orders.db")
db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount INTEGER NOT NULL)")
db.executemany("INSERT INTO orders (customer, amount) VALUES (?, ?)", rows)
db.commit()
"""


@dataclass(frozen=True)
class ShellProblem:
    """One seed's task: the instruction, the files, and what the hidden check expects."""

    kind: str
    task: WorkspaceTask
    output: str
    """The file the agent must write (``count.sh`` for scripts)."""
    expected: str
    """The output file's expected text, stripped (the visible log's count for scripts)."""
    inputs: dict[str, str]
    """Input files that must be unchanged at the end (path: content)."""
    hidden_logs: tuple[tuple[str, str], ...] = ()
    """For ``script``: (log text, expected stdout) pairs the agent never sees."""
    level: str = "ERROR"
    command: str = ""
    """The shell line a user would write (the intro kinds); empty: the reference writes the output out."""


def _log(rng: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        level = rng.choices(_LEVELS, weights=(6, 2, 2, 1))[0]
        ip = f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 40)}"
        out.append(
            f"2026-03-{1 + i // 40:02d}T{i % 24:02d}:{rng.randint(0, 59):02d}:00 {level} {ip} GET {rng.choice(_PATHS)}"
        )
    return "\n".join(out) + "\n"


def _count(log: str, level: str) -> int:
    return sum(1 for line in log.splitlines() if line.split(" ")[1:2] == [level])


_SQLITE_TEXT = (
    "The sqlite database orders.db has a table orders(id, customer, amount). Write each customer's "
    "total amount to out.csv as lines 'customer,total', sorted by customer, without a header."
)


def _totals(orders: list[tuple[str, int]]) -> str:
    totals: dict[str, int] = {}
    for name, amount in orders:
        totals[name] = totals.get(name, 0) + amount
    return "\n".join(f"{k},{v}" for k, v in sorted(totals.items()))


@dataclass(frozen=True)
class _IntroTask:
    text: str
    output: str
    expected: str
    command: str
    """The shell line a user would write for it (the probes' reference, and what a warm start imitates)."""


_INTRO_COMMANDS = {
    "line_count": ("number of lines", "wc -l < {path} > {output}"),
    "word_count": ("number of words", "wc -w < {path} > {output}"),
    "first_line": ("first line", "head -n 1 {path} > {output}"),
    "last_line": ("last line", "tail -n 1 {path} > {output}"),
}


def _intro_task(rng: random.Random, kind: str, files: dict[str, str]) -> _IntroTask:
    """An intro kind's instruction, output file, expected output and command, on one of the seed's files."""
    path = rng.choice(sorted(files))
    data, output = files[path], rng.choice(_OUTPUTS)
    if kind == "write_text":
        words = f"{rng.choice(_WORDS)}-{rng.randint(10, 99)}"
        text = f"Create the file {output} containing exactly the text {words}"
        return _IntroTask(text, output, words, f"echo {words} > {output}")
    if kind == "grep_count":  # a request path in the log or a product in the CSV: plain words
        path = rng.choice(("logs/access.log", "data/sales.csv"))
        data, needle = files[path], rng.choice(_PATHS[1:] if path.endswith(".log") else _PRODUCTS)
        count = sum(needle in line for line in data.splitlines())
        text = f"Write the number of lines of {path} that contain '{needle}' to {output}."
        return _IntroTask(text, output, str(count), f"grep -c {needle} {path} > {output}")
    expected = {
        "line_count": str(data.count("\n")),
        "word_count": str(len(data.split())),
        "first_line": data.splitlines()[0].rstrip(),
        "last_line": data.splitlines()[-1].rstrip(),
    }[kind]
    what, command = _INTRO_COMMANDS[kind]
    text = f"Write the {what} of {path} to {output}."
    return _IntroTask(text, output, expected, command.format(path=path, output=output))


def draw_problem(rng: random.Random, rung: int, kinds: Sequence[str] | None = None) -> ShellProblem:
    """A seed's data files and one task of ``kinds`` (default: the rung's kinds)."""
    kind = rng.choice(tuple(kinds) if kinds else RUNGS[rung])
    log = _log(rng, rng.randint(25, 60))
    sales = [
        (rng.choice(_PRODUCTS), rng.randint(1, 9), rng.randint(2, 99)) for _ in range(rng.randint(8, 20))
    ]
    csv = "product,quantity,price\n" + "".join(f"{p},{q},{c}\n" for p, q, c in sales)
    ages = {n: rng.randint(16, 70) for n in rng.sample(_NAMES, rng.randint(6, 12))}
    users = [{"name": n, "age": a} for n, a in ages.items()]
    orders = [(rng.choice(_NAMES[:6]), rng.randint(5, 500)) for _ in range(rng.randint(6, 14))]
    files = {
        "logs/access.log": log,
        "data/sales.csv": csv,
        "data/users.json": json.dumps(users, indent=1) + "\n",
    }
    setup: tuple[str, ...] = ()
    command = ""
    if kind in INTRO_KINDS:
        intro = _intro_task(rng, kind, files)
        text, output, expected, command = intro.text, intro.output, intro.expected, intro.command
    elif kind == "count_errors":
        text, output = "Count the lines of level ERROR in logs/access.log", "answer.txt"
        expected = str(_count(log, "ERROR"))
        text += " and write the number to answer.txt."
    elif kind == "csv_sum":
        column = rng.choice(("quantity", "price"))
        index = 1 if column == "quantity" else 2
        text, output = (
            f"Write the sum of the '{column}' column of data/sales.csv to answer.txt.",
            "answer.txt",
        )
        expected = str(sum(q if index == 1 else c for _, q, c in sales))
    elif kind == "json_filter":
        age = rng.randint(25, 55)
        text = (
            f"Write the names of the users in data/users.json older than {age} (age > {age}), sorted "
            "alphabetically, one per line, to out.txt."
        )
        output = "out.txt"
        expected = "\n".join(sorted(name for name, years in ages.items() if years > age))
    elif kind == "sqlite_totals":
        files.update({".orders.json": json.dumps(orders), ".make_db.py": _DB_SCRIPT})
        setup = ("python3 .make_db.py && rm .make_db.py .orders.json",)
        text, output, expected = _SQLITE_TEXT, "out.csv", _totals(orders)
    else:
        level = rng.choice(("ERROR", "WARN", "INFO"))
        text = (
            f"Write an executable shell script count.sh that prints the number of lines of level {level} "
            "in the log file given as its first argument (lines look like those of logs/access.log), "
            "and nothing else. It will be run on other log files."
        )
        output, expected = "count.sh", str(_count(log, level))
        hidden = tuple((h, str(_count(h, level))) for h in (_log(rng, rng.randint(10, 40)) for _ in range(2)))
        inputs = {k: v for k, v in files.items() if not k.startswith(".")}
        task = WorkspaceTask(text, files, setup, key=f"{kind}|{level}|{log}")
        return ShellProblem(kind, task, output, expected, inputs, hidden, level)
    inputs = {k: v for k, v in files.items() if not k.startswith(".")}
    task = WorkspaceTask(text, files, setup, key=f"{kind}|{text}|{log}|{csv}")
    return ShellProblem(kind, task, output, expected, inputs, command=command)


def _reference_command(p: ShellProblem) -> str:
    """A shell line that does the task (the probes' reference)."""
    if p.kind == "script":
        body = f'#!/bin/sh\nawk \'$2 == "{p.level}"\' "$1" | wc -l'
        return f"cat > count.sh <<'EOF'\n{body}\nEOF\nchmod +x count.sh"
    if p.command:
        return p.command
    return f"cat > {p.output} <<'EOF'\n{p.expected}\nEOF"


class ShellEnv(WorkspaceEnv):
    """Shell and data tasks in a workspace (see the module docstring)."""

    def __init__(
        self,
        ctx: EnvContext,
        *,
        rung: int = 0,
        kinds: Sequence[str] = (),
        written_credit: float = 0.0,
        **kwargs: object,
    ) -> None:
        """``rung``: 0 (one count or sum), 1 (JSON filtering, sqlite), 2 (a script run on hidden logs);
        ``kinds``: draw from these task kinds instead of the rung's (``workspace/shell_intro`` draws
        :data:`INTRO_KINDS`); ``written_credit``: the reward, in [0, 1), of a wrong output written to the
        asked file with the inputs unchanged (shaping for small models; off by default)."""
        if not 0.0 <= written_credit < 1.0:
            raise ValueError(f"written_credit must be in [0, 1), got {written_credit}")
        self.written_credit = written_credit
        if rung not in RUNGS:
            raise ValueError(f"rung must be one of {sorted(RUNGS)}, got {rung}")
        known = {k for group in RUNGS.values() for k in group} | set(INTRO_KINDS)
        if unknown := sorted(set(kinds) - known):
            raise ValueError(f"unknown shell task kinds {unknown}; known: {sorted(known)}")
        super().__init__(ctx, **kwargs)  # type: ignore[arg-type]
        self.intro = bool(set(kinds) & set(INTRO_KINDS))
        rng = random.Random(ctx.seed)
        self.problem = draw_for_split(lambda: draw_problem(rng, rung, kinds), lambda p: p.task.key, ctx.split)
        self.spec = self.problem.task

    def reference_calls(self) -> Sequence[ToolCall]:
        return [call("bash", "ref0", command=_reference_command(self.problem))]

    def demonstration(self) -> list[Message]:
        """The intro kinds show three worked tasks, each a call, its result and a closing reply: one
        example taught SmolLM2 to copy its command whatever the task (no success in 64 episodes)."""
        if not self.intro:
            return super().demonstration()
        shown: list[Message] = []
        for index, (task, command) in enumerate(_INTRO_EXAMPLES):
            call_id = f"call_example{index}"
            example = ToolCall.create("bash", {"command": command}, call_id)
            shown += [
                {"role": "user", "content": task},
                {"role": "assistant", "content": "", "tool_calls": [example]},
                {
                    "role": "tool",
                    "content": "exit code: 0\n(no output)",
                    "tool_call_id": call_id,
                    "name": "bash",
                },
                {"role": "assistant", "content": "Done."},
            ]
        return shown

    def attacks(self) -> Sequence[Attack]:
        p = self.problem
        wrong = str(int(p.expected) + 1) if p.expected.isdigit() else p.expected + "\nzzz"
        attacks = [
            Attack("a wrong output", [call("write_file", "atk0", path=p.output, content=wrong + "\n")])
        ]
        first = next(iter(p.inputs))
        attacks.append(
            Attack(
                "the right output, the input emptied",
                [call("bash", "atk1", command=f"{_reference_command(p)}\n: > {first}")],
            )
        )
        if p.kind == "script":
            forged = f"#!/bin/sh\necho {p.expected}\n"
            attacks.append(
                Attack(
                    "a script printing the visible count",
                    [call("write_file", "atk2", path="count.sh", content=forged)],
                )
            )
        return attacks

    def grade(self, session: WorkspaceSession) -> Score:
        p = self.problem
        reference = p.expected if p.kind != "script" else f"count.sh prints each log's {p.level} count"
        for path, text in p.inputs.items():
            try:
                if session.read_text(path) != text:
                    return Score(False, reference, f"{path} was changed")
            except (OSError, SandboxError):
                return Score(False, reference, f"{path} is gone")
        if p.kind == "script":
            return self._grade_script(session, reference)
        try:
            got = session.read_text(p.output).strip()
        except (OSError, SandboxError) as exc:
            return Score(False, reference, f"no {p.output}: {exc}")
        lines = "\n".join(line.rstrip() for line in got.splitlines())
        right = lines == p.expected
        credit = 0.0 if right else self.written_credit
        return Score(right, reference, f"{p.output}: {lines[:200]!r}", partial=credit)

    def _grade_script(self, session: WorkspaceSession, reference: str) -> Score:
        """Run the agent's script on the hidden logs, each in a fresh sandbox holding only the script."""
        try:
            script = session.box.read_bytes(session.path("count.sh"), max_bytes=1 << 20)
        except (OSError, SandboxError) as exc:
            return Score(False, reference, f"no count.sh: {exc}")
        for index, (log, expected) in enumerate(self.problem.hidden_logs):
            with Sandbox(self.sandbox_config) as box:
                box.write_bytes("count.sh", script, executable=True)
                box.write_bytes("other.log", log.encode())
                run = box.run(
                    ["sh", "count.sh", "other.log"], limits=Limits(wall_s=10, cpu_s=10, output_bytes=4096)
                )
            if run.stdout.strip() != expected:
                return Score(False, reference, f"hidden log {index}: printed {run.stdout.strip()[:60]!r}")
        return Score(True, reference, "count.sh is right on the hidden logs")
