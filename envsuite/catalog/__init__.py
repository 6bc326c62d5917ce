"""The catalog: every env by versioned id, and how an id becomes an env, a group builder or a dataset.

* ``registration``: the registry (``EnvSpec``, ``register``, ``spec``, families, tags, difficulty rungs,
  deprecations, plugins through the ``envsuite.envs`` entry point); a public module, also importable by
  its older path ``envsuite.registration``.
* ``_entries``: the core catalog (the math, code and tool-use envs and the other built-in families), one
  ``register`` call per env version; the games register from ``envsuite.games`` as a plugin.
* ``_make``: ``make_env`` / ``make_group_builder`` / ``make_dataset_builder`` (and ``envsuite.make``'s
  spec lookup): what a spec says, nothing else.
* ``_select``: choosing envs by id, ``family:``, ``tag:``, glob and ``!`` exclusions (``select_envs``).
* ``_mixture``: several envs as one RL dataset (``make_mixture_dataset_builder``).

Their public names are ``envsuite``'s own (``envsuite.make_env``, ``envsuite.register``, ...); this
package imports nothing itself, so importing the registry never loads the rest.
"""
