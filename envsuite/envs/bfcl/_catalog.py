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


def env_id(category: str) -> str:
    """The catalog id of BFCL ``category`` (catalog name, e.g. ``simple``)."""
    return f"{NAMESPACE}/{category}-v0"


def register_bfcl() -> list[str]:
    """Register ``bfcl/<category>-v0`` for every single-turn category (once: the core catalog calls it;
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
    return added
