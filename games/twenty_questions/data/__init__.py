"""Data files of twenty questions (a package so setuptools ships the JSON/JSONL files)."""
