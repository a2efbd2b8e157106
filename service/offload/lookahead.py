"""The Expert Lookahead Buffer (MoE-SpeQ §3.3.1): k × L × top_k cells of (expert, confidence) from the draft pass.

Row i holds the draft's routing of the i-th token it ran on, one cell per (layer, top-k slot). The verify that follows
runs the same tokens through the target layer by layer, so the buffer also tracks how far that verify has got
(`cursor`, the layer it is in): an expert's next use is `layer - cursor` layers ahead, and experts of layers already
passed are no longer needed by this window. Shared by the draft loop, the prefetch thread and eviction, hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from service.offload.types import ExpertKey, LookaheadEntry


class ExpertLookaheadBuffer:
    def __init__(self, num_layers: int, num_experts: int):
        if num_layers < 1 or num_experts < 1:
            raise ValueError(f"need at least one layer and one expert, got {num_layers}, {num_experts}")
        self.num_layers = num_layers
        self.num_experts = num_experts
        self._lock = threading.Lock()
        self._rows: list[tuple[LookaheadEntry, ...]] = []
        self._confidence: dict[ExpertKey, float] = {}  # best confidence per predicted expert
        self._cursor = 0

    def begin_window(self) -> None:
        """Forget the previous window: a new draft pass starts and verify has not begun."""
        with self._lock:
            self._rows.clear()
            self._confidence.clear()
            self._cursor = 0

    def add_token(self, expert_ids: Sequence[Sequence[int]], confidences: Sequence[Sequence[float]]) -> int:
        """Append the draft's routing of one token, `expert_ids[l][j]` with `confidences[l][j]`; returns the row index."""
        if len(expert_ids) != self.num_layers or len(confidences) != self.num_layers:
            raise ValueError(
                f"need one routing per layer ({self.num_layers}), got {len(expert_ids)}, {len(confidences)}"
            )
        with self._lock:
            token = len(self._rows)
            row = []
            for layer, (ids, confs) in enumerate(zip(expert_ids, confidences, strict=True)):
                for expert, conf in zip(ids, confs, strict=True):
                    if not 0 <= expert < self.num_experts:
                        raise ValueError(f"expert {expert} out of range at layer {layer}")
                    row.append(LookaheadEntry(token, layer, int(expert), float(conf)))
                    key = (layer, int(expert))
                    self._confidence[key] = max(self._confidence.get(key, 0.0), float(conf))
            self._rows.append(tuple(row))
            return token

    def advance(self, layer: int) -> None:
        """The verify forward has reached `layer`; `num_layers` means it finished."""
        with self._lock:
            self._cursor = max(self._cursor, layer)

    def next_use(self, key: ExpertKey) -> int | None:
        with self._lock:
            layer = key[0]
            if key not in self._confidence or layer < self._cursor:
                return None
            return layer - self._cursor

    def entries(self, tokens: range | None = None) -> list[LookaheadEntry]:
        """Cells of the rows in `tokens` (all rows when None), row-major."""
        with self._lock:
            rows = self._rows if tokens is None else self._rows[tokens.start : tokens.stop]
            return [entry for row in rows for entry in row]

    def pending(self, tokens: range | None = None, min_confidence: float = 0.0) -> list[ExpertKey]:
        """Distinct experts of `tokens` still ahead of the verify cursor, in verify order: layer, then confidence."""
        best: dict[ExpertKey, float] = {}
        for entry in self.entries(tokens):
            if entry.confidence >= min_confidence:
                key = (entry.layer, entry.expert)
                best[key] = max(best.get(key, 0.0), entry.confidence)
        with self._lock:
            cursor = self._cursor
        return sorted((k for k in best if k[0] >= cursor), key=lambda k: (k[0], -best[k], k[1]))

    @property
    def num_tokens(self) -> int:
        with self._lock:
            return len(self._rows)
