"""Test-wide settings: offline hub, no Tinker key, and the tiny model for anything that samples."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
# The hosted Tinker client hangs silently on a fake key; tests must never reach it.
os.environ.pop("TINKER_API_KEY", None)

TEST_MODEL = "tiny-random"
