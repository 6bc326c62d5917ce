"""The one exception that means "the user asked for something that cannot be done".

:class:`UsageError` marks a mistake in what was asked (an unknown env id or model, a setting out of
range, a missing file, an address without a key), not a fault in envsuite. Its message says what is
wrong and, where it can, what to do instead. The ``envsuite`` command prints such an error as one line
(exit 2) and every other exception with its traceback, so a bug never reads like a typo.

It subclasses :class:`ValueError`, so code that catches ``ValueError`` keeps working; the specific
errors subclass it (``RegistryError``, ``EnvKwargsError``, ``UnknownModelError``, the trainer's
``ConfigError``, the store's ``StoreURLError``...) alongside the builtin they were before.
"""

from __future__ import annotations


class UsageError(ValueError):
    """A request that cannot be done as asked; the message says what to change."""
