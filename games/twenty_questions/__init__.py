"""Twenty questions: the env, its answerers (offline rules or any MessageCompleter), and their evaluation.

``TwentyQuestionsEnv`` is registered as ``twenty_questions-v0``. See ``docs/twenty_questions.md``.
"""

from envsuite.games.twenty_questions._answer import Answer, Answerer, CompleterAnswerer, normalize_reply
from envsuite.games.twenty_questions._evaluation import (
    DEV_FILE,
    LABELLED_FILE,
    AccuracyReport,
    LabelledCase,
    evaluate_answerer,
    load_labelled_cases,
)
from envsuite.games.twenty_questions._kb import (
    Entity,
    KnowledgeBase,
    knowledge_base_from_json,
    load_knowledge_base,
    word_split,
)
from envsuite.games.twenty_questions._rules import RuleAnswerer
from envsuite.games.twenty_questions.env import (
    EASY_LISTED_GUESS_REWARD,
    EASY_RULES,
    EASY_SYSTEM_PROMPT,
    TwentyQuestionsEnv,
    guess_in,
)

__all__ = [
    # env
    "TwentyQuestionsEnv",
    "guess_in",
    "EASY_LISTED_GUESS_REWARD",
    "EASY_RULES",
    "EASY_SYSTEM_PROMPT",
    # answerers
    "Answer",
    "Answerer",
    "CompleterAnswerer",
    "RuleAnswerer",
    "normalize_reply",
    # knowledge base
    "Entity",
    "KnowledgeBase",
    "knowledge_base_from_json",
    "load_knowledge_base",
    "word_split",
    # evaluation
    "DEV_FILE",
    "LABELLED_FILE",
    "AccuracyReport",
    "LabelledCase",
    "evaluate_answerer",
    "load_labelled_cases",
]
