"""The built-in catalog: one ``register`` call per env version. Plain data; nothing heavy is imported."""

from __future__ import annotations

from envsuite.registration import EnvKind, register

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
    "twenty_questions-v0",
    entry_point="games.twenty_questions.env:TwentyQuestionsEnv",
    kind=EnvKind.MULTI_TURN,
    description="Ask yes/no questions, then 'Guess: <word>'; offline deterministic answerer by default.",
    reward_range=(0.0, 1.0),
    max_turns=20,
    partner_kwarg="answerer",
    tags=("game", "dialogue"),
)
