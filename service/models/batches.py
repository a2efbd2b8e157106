"""Seeded training batches drawn from per-domain token arrays.

The batch for step s depends only on (seed, s), so a run resumed from a checkpoint at step s sees exactly the
data a run that never stopped would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from service.models.corpus import DOMAINS


@dataclass(frozen=True)
class TokenData:
    arrays: dict[str, np.ndarray]  # domain -> flat uint16 token ids
    weights: dict[str, float]  # domain -> sampling probability (sums to 1)

    @classmethod
    def load(cls, tokens_dir: Path, split: str, weights: dict[str, float] | None = None) -> TokenData:
        arrays = {}
        for domain in DOMAINS:
            path = tokens_dir / f"{domain}.{split}.npy"
            if not path.exists():
                raise FileNotFoundError(f"{path} missing; run `moe-serve model corpus` first")
            arrays[domain] = np.load(path, mmap_mode="r")
        return cls.from_arrays(arrays, weights)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], weights: dict[str, float] | None = None) -> TokenData:
        weights = weights or {d: 1.0 for d in arrays}
        if set(weights) != set(arrays) or min(weights.values()) < 0 or sum(weights.values()) <= 0:
            raise ValueError(f"weights {weights} must be non-negative and cover domains {sorted(arrays)}")
        total = sum(weights.values())
        return cls(arrays=arrays, weights={d: w / total for d, w in weights.items()})

    def batch(self, seed: int, step: int, batch_size: int, seq_len: int) -> torch.Tensor:
        """[batch_size, seq_len + 1] int64 windows; inputs are [:, :-1], labels [:, 1:]."""
        rng = np.random.default_rng([seed, step])
        domains = list(self.arrays)
        picks = rng.choice(len(domains), size=batch_size, p=[self.weights[d] for d in domains])
        rows = []
        for index in picks:
            ids = self.arrays[domains[index]]
            if ids.size <= seq_len + 1:
                raise ValueError(f"domain {domains[index]!r} has {ids.size} tokens, fewer than a window")
            start = int(rng.integers(0, ids.size - seq_len - 1))
            rows.append(np.asarray(ids[start : start + seq_len + 1], dtype=np.int64))
        return torch.from_numpy(np.stack(rows))
