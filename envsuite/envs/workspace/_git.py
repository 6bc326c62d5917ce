"""``workspace/git``: branches, a merge conflict to resolve, a bisect to find the commit that broke a test.

Each seed builds a repository in ``/work/repo`` by running git in the sandbox (fixed identity and dates,
so every run of a seed makes the same hashes), then draws the rung's task:

* rung 0, ``branch``: make a branch off ``main`` holding one new commit that adds a given file;
  ``main`` must stay where it was;
* rung 1, ``merge``: ``main`` and ``feature`` both changed the same line of ``settings.ini``; merge
  ``feature`` into ``main`` resolving the conflict as the instruction says (a merge commit with both
  tips as parents, the file as asked, nothing else changed);
* rung 2, ``bisect``: a linear history of 8-16 commits, one of which broke ``python3 test_calc.py``;
  write the full hash of the first bad commit to ``/work/answer.txt``.

The hidden check reads the repository after the episode with git plumbing only (``rev-parse``,
``cat-file``, ``rev-list``: none runs hooks, a pager or an fsmonitor the agent could have configured),
with a fresh ``HOME`` and no system or global config.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from envsuite.core import EnvContext, ToolCall
from envsuite.envs._problem import draw_for_split
from envsuite.envs.tool_use import Score
from envsuite.envs.workspace._env import Attack, WorkspaceEnv, WorkspaceTask, call
from envsuite.envs.workspace._session import WorkspaceSession

REPO = "repo"
_TOPICS = ("parser", "cache", "login", "export", "search", "report", "theme", "upload")
_KEYS = ("timeout", "retries", "workers", "port", "level", "limit")


@dataclass(frozen=True)
class GitProblem:
    kind: str
    task: WorkspaceTask
    branch: str = ""
    path: str = ""
    content: str = ""
    bad_index: int = 0
    """For ``bisect``: which commit (0-based, oldest first) broke the test."""


def _commit(message: str, n: int) -> str:
    # Each commit one second after the last: distinct dates keep the history's order unambiguous.
    date = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}Z"
    return f"GIT_AUTHOR_DATE={date} GIT_COMMITTER_DATE={date} git commit -q -m {shlex.quote(message)}"


def _init(files: dict[str, str]) -> list[str]:
    adds = " && ".join(
        f"mkdir -p $(dirname {shlex.quote(p)}) && printf %s {shlex.quote(t)} > {shlex.quote(p)}"
        for p, t in files.items()
    )
    return [
        f"git init -q -b main {REPO} && cd {REPO} && {adds} && git add -A && {_commit('Initial commit', 0)}"
    ]


def _branch(rng: random.Random) -> GitProblem:
    topic = rng.choice(_TOPICS)
    branch = f"feature/{topic}-{rng.randint(10, 99)}"
    path = f"docs/{topic}.md"
    content = f"# {topic.title()}\n\nNotes on the {topic} ({rng.randint(100, 999)}).\n"
    setup = _init({"README.md": "# Demo\n", "src/app.py": "print('app')\n"})
    text = (
        f"In the git repository /work/repo, create a branch named {branch} from main with one new commit "
        f"that adds the file {path} with exactly this content:\n\n{content}\nLeave main as it is."
    )
    return GitProblem(
        "branch", WorkspaceTask(text, setup=setup, key=f"branch|{branch}|{content}"), branch, path, content
    )


def _merge(rng: random.Random) -> GitProblem:
    key = rng.choice(_KEYS)
    base, ours, theirs = rng.sample(range(2, 90), 3)
    other = rng.choice([k for k in _KEYS if k != key])
    start = f"[server]\n{key} = {base}\n{other} = 1\n"
    main_text, feature_text = (
        start.replace(f"= {base}", f"= {ours}"),
        start.replace(f"= {base}", f"= {theirs}"),
    )
    keep = rng.choice(("main", "feature"))
    final = main_text if keep == "main" else feature_text
    setup = [
        *_init({"settings.ini": start, "app.py": "print('hi')\n"}),
        f"cd {REPO} && git checkout -q -b feature && printf %s {shlex.quote(feature_text)} > settings.ini && "
        f"git add settings.ini && {_commit(f'Set {key} to {theirs}', 1)} && git checkout -q main && "
        f"printf %s {shlex.quote(main_text)} > settings.ini && git add settings.ini && {_commit(f'Set {key} to {ours}', 2)}",
    ]
    value = ours if keep == "main" else theirs
    text = (
        f"In the git repository /work/repo, merge the branch feature into main (a merge commit on main). "
        f"Both changed '{key}' in settings.ini; resolve the conflict by keeping {key} = {value} (the value "
        f"on {keep}) and commit the merge."
    )
    return GitProblem(
        "merge",
        WorkspaceTask(text, setup=setup, key=f"merge|{start}|{ours}|{theirs}|{keep}"),
        "main",
        "settings.ini",
        final,
    )


def _bisect(rng: random.Random) -> GitProblem:
    count = rng.randint(8, 16)
    bad = rng.randint(1, count - 2)  # never the tip: main's own hash must not be the answer
    factor = rng.randint(2, 9)
    setup = _init(
        {
            "calc.py": f"def scale(x):\n    return x * {factor}\n",
            "test_calc.py": f"from calc import scale\nassert scale(3) == {3 * factor}, 'scale is broken'\nprint('ok')\n",
        }
    )
    lines = [f"cd {REPO}"]
    for i in range(1, count):
        body = (
            f"def scale(x):\n    # revision {i}\n    return x * {factor}"
            + (" + 1" if i >= bad else "")
            + "\n"
        )
        lines.append(
            f"printf %s {shlex.quote(body)} > calc.py && git add calc.py && {_commit(f'Revise scale ({i})', i)}"
        )
    text = (
        "In the git repository /work/repo, `python3 test_calc.py` passes on the first commit and fails on "
        "main. Find the first commit where it fails and write that commit's full hash to /work/answer.txt."
    )
    task = WorkspaceTask(text, setup=(*setup, " && ".join(lines)), key=f"bisect|{count}|{bad}|{factor}")
    return GitProblem("bisect", task, bad_index=bad)


_KINDS = {0: _branch, 1: _merge, 2: _bisect}
_PLUMBING = "HOME=/tmp/.grader-home GIT_CONFIG_GLOBAL=/dev/null git -C /work/repo "


class GitEnv(WorkspaceEnv):
    """Git work in a generated repository (see the module docstring)."""

    def __init__(self, ctx: EnvContext, *, rung: int = 0, **kwargs: object) -> None:
        """``rung``: 0 (a branch with a commit), 1 (a merge conflict), 2 (a bisect)."""
        if rung not in _KINDS:
            raise ValueError(f"rung must be 0, 1 or 2, got {rung}")
        super().__init__(ctx, **kwargs)  # type: ignore[arg-type]
        rng = random.Random(ctx.seed)
        self.problem = draw_for_split(lambda: _KINDS[rung](rng), lambda p: p.task.key, ctx.split)
        self.spec = self.problem.task
        self._start_main = ""
        self._bad_hash = ""

    def prepare(self, session: WorkspaceSession) -> None:
        super().prepare(session)
        self._start_main = self._git(session, "rev-parse main") or ""
        if self.problem.kind == "bisect":
            hashes = (self._git(session, "rev-list --reverse main") or "").split()
            self._bad_hash = hashes[self.problem.bad_index]

    @staticmethod
    def _git(session: WorkspaceSession, args: str) -> str | None:
        done = session.run_setup(_PLUMBING + args)
        return done.stdout.strip() if done.ok else None

    def reference_calls(self) -> Sequence[ToolCall]:
        p = self.problem
        if p.kind == "branch":
            line = (
                f"cd repo && git checkout -q -b {p.branch} main && mkdir -p docs && "
                f"printf %s {shlex.quote(p.content)} > {p.path} && git add {p.path} && git commit -q -m 'Add notes'"
            )
        elif p.kind == "merge":
            line = (
                "cd repo && git checkout -q main && { git merge feature -q || true; } && "
                f"printf %s {shlex.quote(p.content)} > settings.ini && git add settings.ini && git commit -q --no-edit"
            )
        else:
            line = (
                "cd repo && git bisect start main $(git rev-list --max-parents=0 main) >/dev/null && "
                "git bisect run python3 test_calc.py >/dev/null 2>&1; "
                "git rev-parse refs/bisect/bad > /work/answer.txt && git bisect reset -q"
            )
        return [call("bash", "ref0", command=line)]

    def attacks(self) -> Sequence[Attack]:
        p = self.problem
        if p.kind == "branch":
            wrong = f"cd repo && git checkout -q -b {p.branch} && git commit -q --allow-empty -m 'Add notes'"
            on_main = f"cd repo && printf %s {shlex.quote(p.content)} > {p.path} && git add {p.path} && git commit -q -m x && git branch {p.branch}"
            return [
                Attack("an empty commit", [call("bash", "atk0", command=wrong)]),
                Attack("committed on main", [call("bash", "atk1", command=on_main)]),
            ]
        if p.kind == "merge":
            copy = (
                f"cd repo && printf %s {shlex.quote(p.content)} > settings.ini && git commit -qam 'resolve'"
            )
            return [Attack("the file without a merge", [call("bash", "atk0", command=copy)])]
        head = "cd repo && git rev-parse main > /work/answer.txt"
        return [Attack("main's hash", [call("bash", "atk0", command=head)])]

    def grade(self, session: WorkspaceSession) -> Score:
        p = self.problem
        if p.kind == "bisect":
            try:
                got = session.read_text("answer.txt").strip()
            except OSError:
                got = ""
            return Score(got == self._bad_hash, self._bad_hash, f"answer.txt: {got[:60]!r}")
        if p.kind == "branch":
            return self._grade_branch(session)
        return self._grade_merge(session)

    def _grade_branch(self, session: WorkspaceSession) -> Score:
        p = self.problem
        reference = f"{p.branch}: main + one commit adding {p.path}"
        tip = self._git(session, f"rev-parse --verify -q refs/heads/{p.branch}^{{commit}}")
        if not tip:
            return Score(False, reference, f"no branch {p.branch}")
        if self._git(session, "rev-parse refs/heads/main") != self._start_main:
            return Score(False, reference, "main moved")
        parent = self._git(session, f"rev-parse --verify -q {tip}^1")
        if parent != self._start_main:
            return Score(False, reference, "the branch is not one commit on main")
        content = self._git(session, f"cat-file blob {tip}:{p.path}")
        ok = content is not None and content == p.content.strip()
        return Score(ok, reference, f"{p.path} on the branch: {(content or '(missing)')[:80]!r}")

    def _grade_merge(self, session: WorkspaceSession) -> Score:
        p = self.problem
        reference = "a merge of feature into main, settings.ini resolved"
        feature = self._git(session, "rev-parse --verify -q refs/heads/feature")
        parents = (self._git(session, "rev-list --parents -n 1 refs/heads/main") or "").split()[1:]
        if sorted(parents) != sorted(x for x in (self._start_main, feature) if x):
            return Score(False, reference, f"main's tip has parents {parents}, not main's and feature's tips")
        content = self._git(session, "cat-file blob refs/heads/main:settings.ini")
        app = self._git(session, "cat-file blob refs/heads/main:app.py")
        ok = content == p.content.strip() and app == "print('hi')"
        return Score(ok, reference, f"settings.ini: {(content or '(missing)')[:80]!r}")
