"""Held-out text of each domain of the bundled model's corpus (issue 3), as bench prompts.

Documents are the ones `service.models.corpus` holds out (seeded hash of the document name), so the model never saw
them in training. With a built corpus (`moe-serve model corpus`, `<corpus>/<domain>/heldout.txt`) they are read from
it; otherwise the same held-out documents are regenerated from their offline sources (man pages skipped: rendering
them takes minutes, and the other prose sources suffice for prompts).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path

from service.models.arithmetic import arithmetic_documents
from service.models.corpus import CorpusConfig, is_heldout, prose_documents, python_documents, read_split

# bench prompt set -> corpus domain
PROMPT_SETS = {"code": "python", "math": "arithmetic", "prose": "prose"}
MIXED = "mixed"


def heldout_documents(domain: str, count: int, corpus_dir: Path | None = None, seed: int = 0) -> list[str]:
    """Up to `count` held-out documents of one corpus domain (at least 400 characters each)."""
    if corpus_dir is not None and (corpus_dir / domain / "heldout.txt").exists():
        docs = read_split(corpus_dir, domain, "heldout")
    else:
        docs = list(itertools.islice(_regenerated(domain, seed), 4 * count))
    docs = [d for d in docs if len(d.strip()) >= 400]
    return docs[:count]


def _regenerated(domain: str, seed: int) -> Iterator[str]:
    fraction = CorpusConfig().heldout_fraction
    if domain == "python":
        named = ((d.name, d.text) for d in python_documents())
    elif domain == "prose":
        named = ((d.name, d.text) for d in prose_documents(seed, man_pages=0))
    elif domain == "arithmetic":
        named = ((f"arithmetic:{i}", t) for i, t in enumerate(arithmetic_documents(seed, 400_000)))
    else:
        raise ValueError(f"unknown corpus domain {domain!r}")
    return (text for name, text in named if is_heldout(name, seed, fraction))


def prompt_sets(count: int, prompt_chars: int, corpus_dir: Path | None = None, seed: int = 0) -> dict[str, list[str]]:
    """{code, math, prose, mixed}: `count` prompts each, a window of `prompt_chars` characters from a held-out
    document (one window per document; mixed interleaves the other three)."""
    rng = random.Random(seed)
    sets = {}
    for name, domain in PROMPT_SETS.items():
        docs = heldout_documents(domain, count, corpus_dir, seed)
        if not docs:
            raise RuntimeError(f"no held-out documents for domain {domain!r}")
        prompts = []
        for doc in itertools.islice(itertools.cycle(docs), count):
            start = rng.randrange(max(len(doc) - prompt_chars, 1))
            prompts.append(doc[start : start + prompt_chars])
        sets[name] = prompts
    sets[MIXED] = [p for group in zip(*sets.values(), strict=True) for p in group][:count]
    return sets
