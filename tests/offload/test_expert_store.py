from __future__ import annotations

import random
import threading

import pytest
import torch

from service.offload.eviction import LookaheadEviction, LruEviction
from service.offload.expert_store import ExpertStore
from service.offload.lookahead import ExpertLookaheadBuffer


def test_hits_misses_and_weights(small_file, small_layers):
    store = ExpertStore(small_file, capacity=2, eviction=LruEviction())
    for key in [(0, 0), (0, 1), (0, 0), (1, 2), (0, 1)]:
        with store.use(key) as (w13, w2):
            assert torch.equal(w13, small_layers[key[0]][0][key[1]]) and torch.equal(
                w2, small_layers[key[0]][1][key[1]]
            )
    stats = store.stats()
    # (0,0) miss, (0,1) miss, (0,0) hit, (1,2) miss evicts LRU (0,1), (0,1) miss
    assert (stats.requests, stats.hits, stats.misses, stats.evictions) == (5, 1, 4, 2)
    assert stats.hit_rate == pytest.approx(0.2) and 0 <= stats.hit_rate <= 1
    assert stats.fetch_bytes == 4 * small_file.expert_bytes and stats.bandwidth > 0
    assert store.resident() == {(0, 1), (1, 2)}


def test_pinned_experts_are_never_evicted(small_file):
    store = ExpertStore(small_file, capacity=2, eviction=LruEviction())
    with store.use((0, 0)):
        with store.use((0, 1)):
            pass
        with store.use((0, 2)):  # (0, 0) is older but pinned: (0, 1) must go
            assert store.resident() == {(0, 0), (0, 2)}


def test_prefetch_gives_up_instead_of_blocking(small_file):
    store = ExpertStore(small_file, capacity=1, eviction=LruEviction())
    with store.use((0, 0)):
        assert not store.prefetch((1, 1))  # the only slot is pinned
    assert store.prefetch((1, 1)) and store.is_ready((1, 1))
    assert not store.prefetch((1, 1))  # already resident
    with store.use((1, 1)):
        pass
    assert store.stats().hits == 1 and store.stats().prefetches == 1


@pytest.mark.parametrize("capacity", [0, 13])
def test_capacity_is_validated(small_file, capacity):
    with pytest.raises(ValueError, match="capacity"):
        ExpertStore(small_file, capacity=capacity, eviction=LruEviction())


@pytest.mark.parametrize("fraction,expected", [(0.25, 3), (0.5, 6), (1.0, 12), (0.01, 1)])
def test_fraction(small_file, fraction, expected):
    assert ExpertStore.with_fraction(small_file, fraction, LruEviction()).capacity == expected


@pytest.mark.parametrize("policy", ["lru", "lookahead"])
def test_bound_holds_under_concurrent_prefetch(small_file, policy):
    lookahead = ExpertLookaheadBuffer(3, 4)
    lookahead.add_token([[0, 1], [2, 3], [0, 2]], [[0.5, 0.5]] * 3)
    eviction = LruEviction() if policy == "lru" else LookaheadEviction(lookahead)
    store = ExpertStore(small_file, capacity=3, eviction=eviction)
    keys = [(layer, expert) for layer in range(3) for expert in range(4)]
    stop = threading.Event()

    def prefetch_loop():
        rnd = random.Random(1)
        while not stop.is_set():
            store.prefetch(rnd.choice(keys))

    thread = threading.Thread(target=prefetch_loop)
    thread.start()
    rnd = random.Random(2)
    try:
        for _ in range(300):
            with store.use(rnd.choice(keys)):
                assert len(store.resident()) <= 3
    finally:
        stop.set()
        thread.join()
    stats = store.stats()
    assert store.peak_occupancy <= 3
    assert stats.requests == 300 == stats.hits + stats.late_hits + stats.misses
    assert 0.0 <= stats.hit_rate <= 1.0
