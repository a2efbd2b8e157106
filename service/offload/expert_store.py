"""A bounded resident set of experts over the slow tier (issue 10 part 2).

At most `capacity` experts are resident or being loaded at any moment: a load first reserves a slot, evicting one
resident, unpinned expert chosen by the eviction policy. The forward pass pins an expert while it computes with it
(`use`), so eviction never pulls weights from under a running matmul. Two entry points load:
- `use(key)` from the forward pass: a hit returns at once; a key already being prefetched is waited for (a late hit);
  otherwise it is fetched on demand. Every wait is counted as stall time.
- `prefetch(key)` from the prefetch thread: never blocks on a full set; it gives up when no slot can be freed or the
  policy will not let this key displace the chosen victim.
Fetching copies the expert out of the memory-mapped file (and to `device`); its time and bytes give the bandwidth.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch

from service.offload.eviction import EvictionPolicy
from service.offload.expert_file import ExpertFile
from service.offload.types import ExpertKey, StoreStats

Weights = tuple[torch.Tensor, torch.Tensor]  # (w13 [2I, H], w2 [H, I])


class ExpertStore:
    def __init__(
        self,
        source: ExpertFile,
        capacity: int,
        eviction: EvictionPolicy,
        *,
        device: torch.device | str = "cpu",
        clock: Callable[[], float] = time.perf_counter,
    ):
        total = source.num_layers * source.num_experts
        if not 1 <= capacity <= total:
            raise ValueError(f"capacity must be in [1, {total}] experts, got {capacity}")
        self.source = source
        self.capacity = capacity
        self.eviction = eviction
        self.device = torch.device(device)
        self._clock = clock
        self._cond = threading.Condition()
        self._ready: dict[ExpertKey, Weights] = {}
        self._loading: set[ExpertKey] = set()
        self._pins: dict[ExpertKey, int] = {}
        self._last_use: dict[ExpertKey, int] = {}
        self._tick = 0
        self._stats = StoreStats()
        self.peak_occupancy = 0  # most experts resident or loading at once

    @classmethod
    def with_fraction(cls, source: ExpertFile, fraction: float, eviction: EvictionPolicy, **kwargs) -> ExpertStore:
        """A store holding `fraction` of all experts (at least one)."""
        if not 0 < fraction <= 1:
            raise ValueError(f"resident fraction must be in (0, 1], got {fraction}")
        return cls(source, max(1, round(fraction * source.num_layers * source.num_experts)), eviction, **kwargs)

    @contextmanager
    def use(self, key: ExpertKey) -> Iterator[Weights]:
        """Pin `key` resident for the block, loading it if needed; yields its weights."""
        weights = self._acquire(key)
        try:
            yield weights
        finally:
            with self._cond:
                self._pins[key] -= 1
                if not self._pins[key]:
                    del self._pins[key]
                self._cond.notify_all()

    def prefetch(self, key: ExpertKey) -> bool:
        """Load `key` if there is room for it now; True when it was fetched by this call."""
        with self._cond:
            if key in self._ready or key in self._loading or not self._reserve(key, demand=False):
                return False
        self._load(key, prefetch=True)
        return True

    def resident(self) -> set[ExpertKey]:
        with self._cond:
            return set(self._ready)

    def is_ready(self, key: ExpertKey) -> bool:
        with self._cond:
            return key in self._ready

    def stats(self) -> StoreStats:
        with self._cond:
            return self._stats

    def _acquire(self, key: ExpertKey) -> Weights:
        start = self._clock()
        with self._cond:
            self._tick += 1
            self._last_use[key] = self._tick
            self._pins[key] = self._pins.get(key, 0) + 1
            if key in self._ready:
                self._count(requests=1, hits=1)
                return self._ready[key]
            if key in self._loading:
                while key not in self._ready:
                    self._cond.wait()
                self._count(requests=1, late_hits=1, stall_s=self._clock() - start)
                return self._ready[key]
            while not self._reserve(key, demand=True):
                self._cond.wait()  # every slot is pinned or loading: one of them frees soon
        weights = self._load(key, prefetch=False)
        with self._cond:
            self._count(requests=1, misses=1, stall_s=self._clock() - start)
        return weights

    def _reserve(self, key: ExpertKey, *, demand: bool) -> bool:
        """Under the lock: claim a slot for `key` (marking it loading), evicting if full; False when impossible now."""
        if len(self._ready) + len(self._loading) >= self.capacity:
            candidates = [k for k in self._ready if k not in self._pins]
            if not candidates:
                return False
            victim = self.eviction.victim(candidates, self._last_use)
            if not demand and not self.eviction.admits(key, victim):
                return False
            del self._ready[victim]
            self._count(evictions=1)
        self._loading.add(key)
        self.peak_occupancy = max(self.peak_occupancy, len(self._ready) + len(self._loading))
        return True

    def _load(self, key: ExpertKey, *, prefetch: bool) -> Weights:
        start = self._clock()
        w13, w2 = self.source.read(*key)
        if self.device.type != "cpu":
            w13, w2 = w13.to(self.device), w2.to(self.device)  # pageable source: the copy completes before return
        seconds = self._clock() - start
        with self._cond:
            self._loading.discard(key)
            self._ready[key] = (w13, w2)
            self._count(fetches=1, prefetches=int(prefetch), fetch_s=seconds, fetch_bytes=self.source.expert_bytes)
            self._cond.notify_all()
        return w13, w2

    def _count(self, **deltas: float) -> None:
        self._stats = replace(self._stats, **{name: getattr(self._stats, name) + v for name, v in deltas.items()})
