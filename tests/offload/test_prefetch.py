from __future__ import annotations

import random

import pytest
import torch

from service.offload.eviction import LookaheadEviction, LruEviction
from service.offload.expert_file import ExpertFile, write_expert_file
from service.offload.expert_store import ExpertStore
from service.offload.lookahead import ExpertLookaheadBuffer
from service.offload.prefetch import Phase, Prefetcher, mid_window_budget, phase_for_step

LAYERS, EXPERTS, TOP_K = 4, 8, 2


@pytest.mark.parametrize(
    "k,phases",
    [
        (1, "3"),
        (2, "13"),
        (3, "123"),
        (4, "1223"),
        (6, "112223"),
    ],
)
def test_phase_schedule(k, phases):
    assert "".join(str(phase_for_step(step, k).value) for step in range(1, k + 1)) == phases


def test_phase_step_out_of_range():
    with pytest.raises(ValueError):
        phase_for_step(0, 3)


@pytest.mark.parametrize(
    "steps_left,step_s,bandwidth,expected",
    [(2, 0.01, 1e6, 20), (2, 0.01, 1e3, 1), (0, 0.01, 1e9, 1), (3, 0.01, None, 1)],
)
def test_mid_window_budget_follows_bandwidth(steps_left, step_s, bandwidth, expected):
    assert mid_window_budget(steps_left, step_s, bandwidth, expert_bytes=1000) == expected


def _affinity_trace(cycles: int, k: int, reuse: float, draft_error: float, seed: int):
    """Per cycle: (draft rows [k][L][top_k], verify routing [k+1][L][top_k]) with token-to-token expert affinity."""
    rnd = random.Random(seed)
    current = [rnd.sample(range(EXPERTS), TOP_K) for _ in range(LAYERS)]
    trace = []
    for _ in range(cycles):
        verify = []
        for _ in range(k + 1):
            nxt = []
            for layer in range(LAYERS):
                keep = [e for e in current[layer] if rnd.random() < reuse]
                nxt.append(keep + rnd.sample([e for e in range(EXPERTS) if e not in keep], TOP_K - len(keep)))
            current = nxt
            verify.append(nxt)
        draft = [
            [[e if rnd.random() > draft_error else rnd.randrange(EXPERTS) for e in row] for row in token]
            for token in verify[:k]
        ]
        trace.append((draft, verify))
    return trace


def _replay(tmp_path, policy: str, capacity: int, trace, k: int) -> float:
    """Drive the store as the runner does (draft rows, phases, verify layer by layer); returns verify hit rate."""
    layers = [(torch.zeros(EXPERTS, 4, 4), torch.zeros(EXPERTS, 4, 2)) for _ in range(LAYERS)]
    source = ExpertFile(write_expert_file(layers, tmp_path / f"{policy}.safetensors"))
    lookahead = ExpertLookaheadBuffer(LAYERS, EXPERTS)
    eviction = LookaheadEviction(lookahead) if policy == "lookahead" else LruEviction()
    store = ExpertStore(source, capacity, eviction)
    prefetcher = Prefetcher(store, lookahead) if policy == "lookahead" else None
    try:
        before = None
        for index, (draft, verify) in enumerate(trace):
            if index == 5:  # warm-up cycles fill the cache for both
                before = store.stats()
            lookahead.begin_window()
            for step, row in enumerate(draft, start=1):
                lookahead.add_token(row, [[0.5] * TOP_K] * LAYERS)
                if prefetcher:
                    prefetcher.on_draft_step(step, k, draft_step_s=1e-3)
            for layer in range(LAYERS):
                if prefetcher:
                    prefetcher.drain()
                    prefetcher.on_verify_layer(layer)
                else:
                    lookahead.advance(layer)
                for expert in sorted({e for token in verify for e in token[layer]}):
                    with store.use((layer, expert)):
                        assert store.peak_occupancy <= capacity
            lookahead.advance(LAYERS)
        return (store.stats() - before).hit_rate
    finally:
        if prefetcher:
            prefetcher.close()
        source.close()


@pytest.mark.parametrize("fraction", [0.25, 0.5])
def test_lookahead_prefetch_beats_lru_on_an_affinity_trace(tmp_path, fraction):
    k = 3
    trace = _affinity_trace(cycles=30, k=k, reuse=0.7, draft_error=0.1, seed=7)
    capacity = int(fraction * LAYERS * EXPERTS)
    lru = _replay(tmp_path, "lru", capacity, trace, k)
    lookahead = _replay(tmp_path, "lookahead", capacity, trace, k)
    assert 0.0 <= lru <= 1.0 and 0.0 <= lookahead <= 1.0
    assert lookahead >= lru
    assert lookahead > 0.8  # a 90 %-accurate draft should cover most of verify


def test_prefetcher_skips_experts_verify_has_passed(small_file):
    lookahead = ExpertLookaheadBuffer(3, 4)
    lookahead.add_token([[0, 1], [2, 3], [0, 2]], [[0.5, 0.5]] * 3)
    store = ExpertStore(small_file, capacity=6, eviction=LookaheadEviction(lookahead))
    prefetcher = Prefetcher(store, lookahead)
    try:
        lookahead.advance(2)
        prefetcher.submit([(0, 0), (1, 2), (2, 0)])
        prefetcher.drain()
        assert store.resident() == {(2, 0)}
        assert prefetcher.on_draft_step(1, 1, 1e-3) is Phase.SATURATION
        prefetcher.drain()
        assert store.resident() == {(2, 0), (2, 2)}
    finally:
        prefetcher.close()
