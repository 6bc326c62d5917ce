"""Training presets shipped with envsuite (TOML files; see ``envsuite.trainers.list_presets``)."""
