from __future__ import annotations

import time

import pytest
import torch

from service.offload.eviction import LookaheadEviction, LruEviction
from service.offload.expert_file import ExpertFile, write_expert_file
from service.offload.expert_store import ExpertStore
from service.offload.governor import OffloadGovernor
from service.offload.lookahead import ExpertLookaheadBuffer
from service.offload.offloaded_experts import ExpertsMode, fused_experts, install
from service.offload.prefetch import Prefetcher
from service.offload.runner import OffloadRunner
from service.offload.tiny_model import tiny_random_mixtral

PROMPT = [3, 17, 42, 99, 7, 250, 128, 64]
LAYERS, EXPERTS = 2, 8


def _runner(tmp_path, policy: str, fraction: float = 0.25, k: int = 3, read_delay_s: float = 0.0, governor=False):
    """policy: "none" (all experts in memory), "lru" (demand fetch) or "lookahead" (prefetch + lookahead eviction)."""
    model = tiny_random_mixtral(num_layers=LAYERS, num_experts=EXPERTS)
    mode, lookahead = ExpertsMode(), ExpertLookaheadBuffer(LAYERS, EXPERTS)
    source = ExpertFile(write_expert_file(fused_experts(model), tmp_path / f"{policy}-{fraction}.safetensors"))
    if read_delay_s:
        read = source.read

        def slow_read(layer, expert):  # a slower tier than the page cache, to make overlap observable
            time.sleep(read_delay_s)
            return read(layer, expert)

        source.read = slow_read
    store = prefetcher = None
    if policy != "none":
        eviction = LookaheadEviction(lookahead) if policy == "lookahead" else LruEviction()
        store = ExpertStore.with_fraction(source, fraction, eviction)
        prefetcher = Prefetcher(store, lookahead) if policy == "lookahead" else None
    install(model, store, mode)
    gov = OffloadGovernor(LAYERS, EXPERTS, 2, source.expert_bytes, resident_fraction=fraction) if governor else None
    return OffloadRunner(model, mode, store, lookahead, prefetcher, k=k, governor=gov), prefetcher


@pytest.fixture
def cleanup():
    prefetchers = []
    yield prefetchers
    for prefetcher in prefetchers:
        if prefetcher is not None:
            prefetcher.close()


def test_greedy_output_unchanged_by_offloading(tmp_path, cleanup):
    outputs = {}
    for policy, fraction in [("none", 1.0), ("lru", 0.25), ("lookahead", 0.25)]:
        runner, prefetcher = _runner(tmp_path, policy, fraction)
        cleanup.append(prefetcher)
        result = runner.generate(PROMPT, 16)
        outputs[policy] = result.tokens
        if runner.store is not None:
            assert runner.store.peak_occupancy <= runner.store.capacity == 4
            assert result.verify_totals().requests > 0
    assert len(outputs["none"]) == 16
    assert outputs["lru"] == outputs["none"] == outputs["lookahead"]


def test_plain_decode_matches_transformers_greedy(tmp_path):
    reference = tiny_random_mixtral(num_layers=LAYERS, num_experts=EXPERTS)
    expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=8, do_sample=False, pad_token_id=0)
    runner, _ = _runner(tmp_path, "lru", k=0)
    assert runner.generate(PROMPT, 8).tokens == expected[0, len(PROMPT) :].tolist()


def test_prefetch_overlaps_drafting(tmp_path, cleanup):
    runner, prefetcher = _runner(tmp_path, "lookahead", k=4, read_delay_s=0.01)
    cleanup.append(prefetcher)
    draft_times: list[float] = []
    runner.mode.listeners.append(lambda layer, ids, w, draft: draft and draft_times.append(time.perf_counter()))
    result = runner.generate(PROMPT, 12)
    busy = list(prefetcher.busy_intervals)
    assert busy, "the prefetcher never fetched"
    overlapped = [t for t in draft_times if any(start <= t <= end for start, end in busy)]
    assert overlapped, "no draft layer ran while the fetch thread was copying"
    assert sum(c.window.prefetches for c in result.cycles) > 0


def test_lookahead_hit_rate_and_stall_vs_lru(tmp_path, cleanup):
    stats = {}
    for policy in ("lru", "lookahead"):
        runner, prefetcher = _runner(tmp_path, policy, 0.25, k=3)
        cleanup.append(prefetcher)
        stats[policy] = runner.generate(PROMPT, 16).verify_totals()
    for s in stats.values():
        assert 0.0 <= s.hit_rate <= 1.0 and s.stall_s >= 0
    assert stats["lookahead"].hit_rate >= stats["lru"].hit_rate


def test_runner_asks_the_governor(tmp_path, cleanup):
    runner, prefetcher = _runner(tmp_path, "lookahead", 0.5, governor=True)
    cleanup.append(prefetcher)
    result = runner.generate(PROMPT, 16)
    assert result.cycles[0].k == runner.governor.initial_k  # cold start
    assert runner.governor.costs() is not None  # it has measured draft, verify and bandwidth since
    assert all(0 <= c.k <= runner.governor.k_limit for c in result.cycles)
    assert 0.0 <= result.acceptance <= 1.0


def test_bad_arguments(tmp_path):
    runner, _ = _runner(tmp_path, "none")
    with pytest.raises(ValueError):
        runner.generate([], 4)
    with pytest.raises(ValueError):
        OffloadRunner(runner.model, runner.mode, None, runner.lookahead, k=-1)
