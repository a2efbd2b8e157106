"""Train-split token arrays of the bundled corpus, encoded with the bundled moe-fine tokenizer (not a retrained one).

Man pages skipped (rendering them takes minutes); held-out documents excluded by the corpus's own seeded split, so the
bench prompts (held-out) stay unseen. Writes OUT/<domain>.train.npy.
"""

import sys
from pathlib import Path

import numpy as np

from service.models.arithmetic import arithmetic_documents
from service.models.corpus import CorpusConfig, is_heldout, prose_documents, python_documents
from service.models.tokenizer import encode_documents, load_tokenizer

ASSETS = Path("service/models/assets/moe-fine")


def train_texts(domain: str) -> list[str]:
    config = CorpusConfig()
    if domain == "python":
        named = ((d.name, d.text) for d in python_documents())
    elif domain == "prose":
        named = ((d.name, d.text) for d in prose_documents(config.seed, man_pages=0))
    else:
        named = (
            (f"arithmetic:{i}", t) for i, t in enumerate(arithmetic_documents(config.seed, config.arithmetic_chars))
        )
    return [t[: config.max_doc_chars] for n, t in named if not is_heldout(n, config.seed, config.heldout_fraction)]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(ASSETS)
    for domain in ("python", "prose", "arithmetic"):
        ids = encode_documents(tokenizer, train_texts(domain))
        np.save(out / f"{domain}.train.npy", ids)
        print(domain, ids.size, flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
