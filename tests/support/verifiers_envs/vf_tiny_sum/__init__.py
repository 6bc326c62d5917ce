"""A tiny verifiers (0.4) environment package for tests: sums of two numbers, graded offline.

Importable by path (tests put ``tests/support/verifiers_envs`` on ``sys.path``), as ``vf-eval`` imports
an installed one. ``reward`` reads the last assistant message; ``in_sandbox`` needs a runtime, so it is
skipped wherever grading runs without one.
"""

import re

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: int


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        replies = [m for m in trace.messages if m.role == "assistant"]
        numbers = re.findall(r"-?\d+", str(replies[-1].content)) if replies else []
        return 1.0 if numbers and int(numbers[-1]) == self.data.answer else 0.0

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(sum(len(str(m.content)) for m in trace.messages if m.role == "assistant"))


class SumConfig(vf.TasksetConfig):
    num_tasks: int = 4


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self) -> list[SumTask]:
        pairs = [(3, 4), (10, 25), (7, 8), (40, 2)][: self.config.num_tasks]
        return [
            SumTask(
                SumData(prompt=f"What is {a} + {b}? Reply with the number.", answer=a + b), self.config.task
            )
            for a, b in pairs
        ]


__all__ = ["SumTaskset"]
