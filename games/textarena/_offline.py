"""Make textarena's word games run offline: a stand-in nltk ``words`` corpus, no downloads, no tagger.

textarena's word games call ``nltk.download`` at import and read ``nltk.corpus.words``; three of them
also run nltk's perceptron POS tagger. None of that data ships with nltk and this machine has no
network. The stand-in corpus is built once from the hunspell list textarena itself ships
(``textarena/envs/utils/data/en_US.dic``) into ``envsuite.models.cache_dir() / "nltk_data"``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_BASIC_SIZE = 850
"""nltk's ``en-basic`` list is Ogden's 850 basic words; the stand-in keeps the same size."""

_lock = threading.Lock()
_done = False


def nltk_data_dir() -> Path:
    """Where the stand-in corpus lives."""
    from envsuite.models import cache_dir

    return cache_dir() / "nltk_data"


def _hunspell_words() -> list[str]:
    from importlib.resources import files

    text = files("textarena.envs.utils.data").joinpath("en_US.dic").read_text(encoding="utf-8")
    words = set()
    for line in text.splitlines()[1:]:
        word = line.split("/", 1)[0].strip()
        if word.isascii() and word.isalpha():
            words.add(word)
    return sorted(words)


def _basic_words(words: list[str]) -> list[str]:
    # Short lower-case words spread evenly over the alphabet stand in for a "basic" vocabulary.
    pool = [w for w in words if w.islower() and 3 <= len(w) <= 6]
    step = max(1, len(pool) // _BASIC_SIZE)
    return pool[::step][:_BASIC_SIZE]


def _write_corpus(root: Path) -> None:
    corpus = root / "corpora" / "words"
    if (corpus / "en").exists() and (corpus / "en-basic").exists():
        return
    corpus.mkdir(parents=True, exist_ok=True)
    words = _hunspell_words()
    tmp = corpus / f"en.tmp{os.getpid()}"
    tmp.write_text("\n".join(words) + "\n", encoding="utf-8")
    tmp.replace(corpus / "en")
    tmp.write_text("\n".join(_basic_words(words)) + "\n", encoding="utf-8")
    tmp.replace(corpus / "en-basic")
    (corpus / "README").write_text(
        "Stand-in for nltk's words corpus, built by envsuite from textarena's en_US.dic.\n", encoding="utf-8"
    )


def _no_download(*args: object, **kwargs: object) -> bool:
    # The data is either present (the stand-in) or cannot be fetched here; never touch the network.
    return True


def _noun_tagger(tokens: list[str], *args: object, **kwargs: object) -> list[tuple[str, str]]:
    return [(token, "NN") for token in tokens]


def ensure_offline_nltk() -> Path:
    """Build the stand-in corpus (once), point nltk at it and stub downloads and the POS tagger.

    Must run before any textarena word-game module is imported (they bind ``pos_tag`` at import).
    Idempotent and thread-safe; returns the nltk data directory.
    """
    global _done
    root = nltk_data_dir()
    with _lock:
        if _done:
            return root
        _write_corpus(root)
        os.environ["NLTK_DATA"] = str(root)
        import nltk
        import nltk.tag

        if str(root) not in nltk.data.path:
            nltk.data.path.insert(0, str(root))
        nltk.download = _no_download
        nltk.pos_tag = _noun_tagger
        nltk.tag.pos_tag = _noun_tagger
        _share_english_dictionaries()
        _done = True
    return root


def _share_english_dictionaries() -> None:
    """Build each of textarena's English dictionaries once per process instead of once per game.

    Word games construct an ``EnglishDictionary`` in their constructor (2-3 s of affix expansion);
    they only read it, so one shared instance per option set is safe. Games import the class by name
    at their own import, which is why this runs before any word-game module is imported.
    """
    from textarena.envs.utils import word_lists

    original = word_lists.EnglishDictionary
    if getattr(original, "_envsuite_shared", False):
        return
    built: dict[tuple[bool, bool, bool], object] = {}

    def shared(
        keep_proper_nouns: bool = False, include_nltk: bool = True, keep_non_alpha: bool = False
    ) -> object:
        key = (keep_proper_nouns, include_nltk, keep_non_alpha)
        if key not in built:
            built[key] = original(keep_proper_nouns, include_nltk, keep_non_alpha)
        return built[key]

    shared._envsuite_shared = True  # type: ignore[attr-defined]
    word_lists.EnglishDictionary = shared
