"""The core catalog (the math envs): one ``register`` call per env version. Plain data; nothing heavy loads.

The games (twenty questions, chess, tic-tac-toe, TextArena) register from ``envsuite.games`` through the
``envsuite.envs`` entry point, like any plugin.
"""

from __future__ import annotations

from envsuite.registration import EnvKind, register, register_scheme

register(
    "arithmetic-v0",
    entry_point="envsuite.envs.arithmetic:ArithmeticEnv",
    kind=EnvKind.SINGLE_TURN,
    description="Procedural arithmetic (digits, operations, terms, negatives); answer graded exactly.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)
register(
    "arithmetic_easy-v0",
    entry_point="envsuite.envs.arithmetic:ArithmeticEnv",
    kwargs={"digits": 1, "operations": ["+"], "n_terms": 2, "answer_format": "number"},
    kind=EnvKind.SINGLE_TURN,
    description="The first rung of arithmetic: one-digit addition, answer as a bare number.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)
register(
    "math-v0",
    entry_point="envsuite.envs.math_word:MathWordEnv",
    kind=EnvKind.SINGLE_TURN,
    description="Multi-step word problems (procedural offline, or GSM8K/MATH JSONL); math-verify grading.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)
register(
    "math_easy-v0",
    entry_point="envsuite.envs.math_word:MathWordEnv",
    kwargs={"problems": "one_step", "answer_format": "number"},
    kind=EnvKind.SINGLE_TURN,
    description="The first rung of math: one-step word problems on small whole numbers, number-only answers.",
    reward_range=(-1.0, 1.0),
    tags=("math",),
)

# Any OpenEnv server is a catalog env: `openenv:http://host:port` (envsuite.adapters.openenv).
register_scheme("openenv", "envsuite.adapters.openenv._client:openenv_spec")
