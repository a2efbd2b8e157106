"""Greedy speculative decoding over a transformers Mixtral whose experts are offloaded (issue 10 parts 1-3).

One cycle, with the KV cache holding tokens [0, n) and `pending` the last emitted token (not yet in the cache):
1. draft k tokens with the INT4 self-draft (same model, draft mode), one token per forward; each forward's routing is
   a row of the Expert Lookahead Buffer and triggers that step's prefetch phase while the next draft step computes;
2. rewind the cache to n (the draft's KV came from INT4 experts) and verify `[pending, d1..dk]` with the target, whose
   experts come through the store: prefetched ones hit, the rest stall;
3. accept the longest prefix the target agrees with, emit it plus the target's own next token, rewind the cache to
   the accepted length. The draft always continues from the target's KV (shared cache, MoE-SpeQ §3.4).
k comes from the governor when one is given (else fixed). Output equals the target's greedy decoding with these batch
shapes whatever the store holds: offloading changes where weights come from, never the arithmetic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from service.offload.expert_store import ExpertStore
from service.offload.governor import OffloadGovernor
from service.offload.lookahead import ExpertLookaheadBuffer
from service.offload.offloaded_experts import ExpertsMode
from service.offload.prefetch import Prefetcher
from service.offload.types import CycleStats, StoreStats


@dataclass
class GenerateResult:
    tokens: list[int]  # generated token ids (prompt excluded)
    cycles: list[CycleStats] = field(default_factory=list)  # one per draft-verify cycle

    @property
    def acceptance(self) -> float:
        """Accepted / proposed draft tokens over the run (0 when nothing was drafted)."""
        proposed = sum(c.k for c in self.cycles)
        return sum(c.accepted for c in self.cycles) / proposed if proposed else 0.0

    def verify_totals(self) -> StoreStats:
        return sum((cycle.verify for cycle in self.cycles), StoreStats())


class OffloadRunner:
    def __init__(
        self,
        model: nn.Module,
        mode: ExpertsMode,
        store: ExpertStore | None,
        lookahead: ExpertLookaheadBuffer,
        prefetcher: Prefetcher | None = None,
        *,
        k: int = 3,
        governor: OffloadGovernor | None = None,
    ):
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.model, self.mode, self.store, self.lookahead = model, mode, store, lookahead
        self.prefetcher, self.k, self.governor = prefetcher, k, governor
        self.num_layers = len(model.model.layers)
        self.mode.on_target_layer = prefetcher.on_verify_layer if prefetcher is not None else lookahead.advance
        self._draft_rows: list[tuple[list[int], list[float]]] = []
        self._device = torch.device("cpu")
        self.mode.listeners.append(self._on_route)

    @torch.no_grad()
    def generate(self, prompt: list[int], max_new_tokens: int) -> GenerateResult:
        if not prompt or max_new_tokens < 1:
            raise ValueError("need a non-empty prompt and max_new_tokens >= 1")
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        self._device = next(self.model.parameters()).device
        self.lookahead.advance(self.num_layers)  # prefill has no lookahead: nothing is "needed"
        logits = self.model(
            input_ids=torch.tensor([prompt], device=self._device), past_key_values=cache, use_cache=True
        ).logits
        pending = int(logits[0, -1].argmax())
        result = GenerateResult(tokens=[pending])
        while len(result.tokens) < max_new_tokens:
            k = min(self.governor.choose_k() if self.governor else self.k, max_new_tokens - len(result.tokens))
            cycle, emitted = self._cycle(cache, pending, k)
            result.cycles.append(cycle)
            result.tokens.extend(emitted)
            pending = emitted[-1]
            if self.governor is not None:
                self.governor.observe(cycle)
        del result.tokens[max_new_tokens:]
        return result

    def _cycle(self, cache, pending: int, k: int) -> tuple[CycleStats, list[int]]:
        n = cache.get_seq_length()
        start_stats = self._stats()
        self.lookahead.begin_window()
        if self.prefetcher is not None:
            self.prefetcher.cancel()
        start = time.perf_counter()
        drafts = self._draft(cache, pending, k)
        draft_s = time.perf_counter() - start
        _rewind(cache, n)
        before_verify = self._stats()
        start = time.perf_counter()
        logits = self.model(
            input_ids=torch.tensor([[pending, *drafts]], device=self._device), past_key_values=cache, use_cache=True
        ).logits
        verify_s = time.perf_counter() - start
        self.lookahead.advance(self.num_layers)
        after = self._stats()
        target = logits[0].argmax(dim=-1).tolist()  # [k+1] the target's choice after each verify position
        accepted = 0
        while accepted < k and drafts[accepted] == target[accepted]:
            accepted += 1
        _rewind(cache, n + accepted + 1)
        emitted = [*drafts[:accepted], target[accepted]]
        return CycleStats(k, accepted, draft_s, verify_s, after - before_verify, after - start_stats), emitted

    def _draft(self, cache, token: int, k: int) -> list[int]:
        drafts: list[int] = []
        with self.mode.drafting():
            for step in range(1, k + 1):
                self._draft_rows.clear()
                started = time.perf_counter()
                logits = self.model(
                    input_ids=torch.tensor([[token]], device=self._device), past_key_values=cache, use_cache=True
                ).logits
                ids, confs = zip(*self._draft_rows, strict=True)
                self.lookahead.add_token(ids, confs)
                if self.prefetcher is not None:
                    self.prefetcher.on_draft_step(step, k, time.perf_counter() - started)
                token = int(logits[0, -1].argmax())
                drafts.append(token)
        return drafts

    def _on_route(self, layer: int, ids: torch.Tensor, weights: torch.Tensor, draft: bool) -> None:
        if draft:  # one draft token per forward: ids/weights [1, top_k]
            self._draft_rows.append((ids[-1].tolist(), weights[-1].tolist()))

    def _stats(self) -> StoreStats:
        return self.store.stats() if self.store is not None else StoreStats()


def _rewind(cache, length: int) -> None:
    """Keep the first `length` positions of the KV cache."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)
