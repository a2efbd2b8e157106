"""Offline training corpus for the embedded MoE: Python stdlib, English prose, generated arithmetic (issue 3).

Everything comes from files any Debian/Ubuntu machine with Python has, so the model can be rebuilt without a
network. Documents are split into train and held-out *by document* (a stdlib file, a man page, a worksheet) with a
seeded hash, so held-out loss measures generalisation to unseen files rather than to unseen windows of seen files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sysconfig
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from service.models.arithmetic import arithmetic_documents

DOMAINS = ("python", "prose", "arithmetic")
DOC_SEPARATOR = "<|endoftext|>"
_OVERSTRIKE = re.compile(r".\x08|\x1b\[[0-9;]*m")
_TEST_PARTS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}


@dataclass(frozen=True)
class CorpusConfig:
    seed: int = 0  # seeds the held-out split, man page sample and arithmetic generator
    heldout_fraction: float = 0.05  # share of documents held out, per domain
    man_pages: int = 1500  # man pages rendered to text (tens of ms each)
    arithmetic_chars: int = 4_000_000  # characters of generated arithmetic
    max_doc_chars: int = 200_000  # longer documents are truncated (a few huge licences/changelogs)


@dataclass(frozen=True)
class Document:
    domain: str  # one of DOMAINS
    name: str  # stable identifier (path or generated id), input to the split hash
    text: str  # the document text


def _read_text(path: Path) -> str:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


def python_documents(stdlib: Path | None = None) -> Iterator[Document]:
    """Standard-library modules, tests excluded (they are repetitive and would dominate the domain)."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if _TEST_PARTS & set(rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        yield Document("python", str(rel), _read_text(path))


def _man_page_paths(seed: int, count: int) -> list[Path]:
    pages = sorted(p for section in ("man1", "man5", "man7", "man8") for p in Path("/usr/share/man", section).glob("*"))
    pages = [p for p in pages if p.is_file() and not p.is_symlink()]
    return sorted(random.Random(seed).sample(pages, min(count, len(pages))))


def _render_man(path: Path) -> str:
    env = {**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": ""}
    try:
        done = subprocess.run(["man", "-P", "cat", "-l", str(path)], capture_output=True, env=env, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return _OVERSTRIKE.sub("", done.stdout.decode("utf-8", errors="replace"))


def prose_documents(seed: int, man_pages: int) -> Iterator[Document]:
    """Technical English: licences, package copyright/README files, pydoc topics, man pages."""
    seen: set[str] = set()

    def fresh(text: str) -> bool:
        # Hundreds of copyright files are the same GPL boilerplate; keep each text once.
        digest = hashlib.sha1(text.encode()).hexdigest()
        if digest in seen or len(text.strip()) < 200:
            return False
        seen.add(digest)
        return True

    for path in sorted(Path("/usr/share/common-licenses").glob("*")):
        text = _read_text(path.resolve())
        if fresh(text):
            yield Document("prose", str(path), text)
    for path in sorted(Path("/usr/share/doc").glob("*/*")):
        if path.is_file() and (path.name == "copyright" or path.name.startswith("README")):
            text = _read_text(path)
            if fresh(text):
                yield Document("prose", str(path), text)
    try:
        from pydoc_data.topics import topics
    except ImportError:
        topics = {}
    for name in sorted(topics):
        if fresh(topics[name]):
            yield Document("prose", f"pydoc:{name}", topics[name])
    for path in _man_page_paths(seed, man_pages):
        text = _render_man(path)
        if fresh(text):
            yield Document("prose", str(path), text)


def is_heldout(name: str, seed: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def build_documents(config: CorpusConfig) -> Iterator[Document]:
    yield from python_documents()
    yield from prose_documents(config.seed, config.man_pages)
    for i, text in enumerate(arithmetic_documents(config.seed, config.arithmetic_chars)):
        yield Document("arithmetic", f"arithmetic:{i}", text)


def write_corpus(config: CorpusConfig, out_dir: Path) -> dict:
    """Write `<domain>/{train,heldout}.txt` under out_dir and a manifest.json; returns the manifest."""
    if not 0.0 < config.heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {config.heldout_fraction}")
    splits: dict[str, dict[str, list[str]]] = {d: {"train": [], "heldout": []} for d in DOMAINS}
    for doc in build_documents(config):
        split = "heldout" if is_heldout(doc.name, config.seed, config.heldout_fraction) else "train"
        splits[doc.domain][split].append(doc.text[: config.max_doc_chars])
    manifest: dict = {"config": asdict(config), "domains": {}}
    for domain, parts in splits.items():
        (out_dir / domain).mkdir(parents=True, exist_ok=True)
        manifest["domains"][domain] = {}
        for split, texts in parts.items():
            if not texts:
                raise RuntimeError(f"corpus domain {domain!r} has no {split} documents; sources missing?")
            (out_dir / domain / f"{split}.txt").write_text(DOC_SEPARATOR.join(texts), encoding="utf-8")
            manifest["domains"][domain][split] = {"documents": len(texts), "chars": sum(map(len, texts))}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def read_split(corpus_dir: Path, domain: str, split: str) -> list[str]:
    """Documents of one domain/split as written by write_corpus."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {DOMAINS}")
    path = corpus_dir / domain / f"{split}.txt"
    if not path.exists():
        raise FileNotFoundError(f"{path} missing; run `moe-serve model corpus` first")
    return path.read_text(encoding="utf-8").split(DOC_SEPARATOR)
