"""The catalog's registry by its older import path, kept for one release after the catalog modules moved
into ``envsuite/catalog/`` (issue 52): the same names as ``envsuite.catalog.registration``, where new code
imports them. The registry object is shared; to swap it (a test's fresh ``Registry``), patch
``envsuite.catalog.registration.registry``, which the catalog's functions read."""

from envsuite.catalog.registration import *  # noqa: F403  (the names of its __all__)
from envsuite.catalog.registration import __all__ as __all__
