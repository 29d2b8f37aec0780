"""Held-out text a visitor would type: the evaluation set for intelligibility (WER), quality (DNSMOS) and duration.

The texts live in `data/visitor_texts.json`, written by hand for this purpose and never used in training
(a test checks that no sentence is in the training corpus). Questions, numbers, prices, times, names,
lists, subordinate clauses and a few multi-sentence paragraphs, in four length buckets so that a content
drop at any length shows.
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).with_name("data") / "visitor_texts.json"

#: Length bucket -> texts, in the file's order ("3-8 words", "9-15 words", "16-30 words", "paragraphs").
BUCKETS: dict[str, tuple[str, ...]] = {bucket: tuple(texts) for bucket, texts in
                                       json.loads(DATA.read_text(encoding="utf-8"))["buckets"].items()}
SHORT, MEDIUM, LONG, PARAGRAPHS = BUCKETS.values()


def visitor_texts(per_bucket: int | None = None) -> list[tuple[str, str]]:
    """(bucket, text) pairs, at most `per_bucket` from each bucket (all when None)."""
    return [(bucket, text) for bucket, texts in BUCKETS.items() for text in texts[:per_bucket]]
