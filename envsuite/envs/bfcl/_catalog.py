"""The ``bfcl/<category>`` catalog entries: plain data; BFCL itself is not imported to register them."""

from __future__ import annotations

from envsuite.catalog.registration import EnvKind, register
from envsuite.envs.bfcl._categories import CATEGORIES, Scoring
from envsuite.envs.bfcl._upstream import missing

NAMESPACE = "bfcl"
ENTRY_POINT = "envsuite.envs.bfcl:BfclEnv"
TIED = (
    "BFCL's irrelevance rule scores every reply without a decodable call 1, an empty reply and a bare "
    "'[]' too, as much as the reference abstention (the reward-hacking suite's tie rule); "
    "envsuite.envs.bfcl.score still scores its entries as BFCL does"
)
"""Why the irrelevance categories are listed, not offered (measured by ``envsuite check``)."""


MULTI_TURN = {
    "multi_turn_base": "the user's requests over several turns, all answerable with the functions given",
    "multi_turn_miss_func": "a turn needs a function not yet given; it is added in a later turn",
    "multi_turn_miss_param": "a turn leaves out a needed argument; the model should ask, not guess",
    "multi_turn_long_context": "the APIs' states are long (many files, many messages)",
}
"""BFCL v4's multi-turn categories (200 entries each) and what each tests."""
MULTI_TURN_ENTRY_POINT = "envsuite.envs.bfcl:BfclMultiTurnEnv"
MAX_POLICY_TURNS = 8 * 21
"""The most replies a multi-turn episode can take: 8 user turns (the most in BFCL v4), each up to BFCL's
step limit of 20 calling replies and one that ends the turn."""


CONTEXT_TOKENS = 32768
"""The context the multi-turn episodes are made with unless the caller names one: their first prompt
alone (some 30 functions declared) is 2,400-5,600 tokens with SmolLM2's tokenizer, and each step adds
the calls' results."""
LONG_CONTEXT_TOKENS = 131072
"""multi_turn_long_context's: its APIs' states are made long on purpose (one ground-truth result alone
ran past 32,768 tokens), for models with 128k windows."""


def env_id(category: str) -> str:
    """The catalog id of BFCL ``category`` (catalog name, e.g. ``simple``)."""
    return f"{NAMESPACE}/{category}-v0"


def register_bfcl() -> list[str]:
    """Register ``bfcl/<category>-v0`` for every single-turn and multi-turn category (once: the core catalog calls it;
    it must not ask the registry what it holds, which would load plugins mid-import); returns the ids.
    Plain data: BFCL is not imported (where it is missing, each id is unavailable with the reason)."""
    why_not = missing()
    added = []
    for category in CATEGORIES:
        register(
            env_id(category.name),
            entry_point=ENTRY_POINT,
            kwargs={"category": category.name},
            kind=EnvKind.SINGLE_TURN,
            description=(
                f"BFCL v4 {category.bfcl_name} ({category.n_items} items): {category.description}; "
                "scored by BFCL's own checker."
            ),
            reward_range=(0.0, 1.0),
            tags=("tool-use", "bfcl", "eval-only", category.scoring.value),
            family="bfcl",
            unavailable=why_not or (TIED if category.scoring is Scoring.IRRELEVANCE else None),
        )
        added.append(env_id(category.name))
    for name, description in MULTI_TURN.items():
        register(
            env_id(name),
            entry_point=MULTI_TURN_ENTRY_POINT,
            kwargs={"category": name},
            kind=EnvKind.MULTI_TURN,
            description=f"BFCL v4 {name} (200 items): {description}; BFCL's simulated APIs, its own checker.",
            reward_range=(0.0, 1.0),
            max_turns=MAX_POLICY_TURNS,
            context_tokens=LONG_CONTEXT_TOKENS if "long_context" in name else CONTEXT_TOKENS,
            tags=("tool-use", "bfcl", "eval-only", "multi-turn"),
            family="bfcl",
            unavailable=why_not,
        )
        added.append(env_id(name))
    return added
