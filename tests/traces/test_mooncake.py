"""The Mooncake loader on the real conversation trace: the facts shared/traces/README.md gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.traces.mooncake import load_mooncake
from service.traces.types import BLOCK_TOKENS, blocks_for


@pytest.fixture(scope="module")
def mooncake(traces_dir):
    return load_mooncake(traces_dir / "mooncake_conversation_trace.jsonl")


def test_rows_duration_and_rates(mooncake):
    assert len(mooncake) == 12_031
    assert mooncake.requests[0].arrival_s == 0.0
    assert mooncake.duration_s == pytest.approx(3537, abs=0.5)
    assert len(mooncake) / mooncake.duration_s == pytest.approx(3.4, abs=0.05)
    per_second = np.bincount(np.array([r.arrival_s for r in mooncake.requests]).astype(int))
    assert per_second.max() == 28


def test_token_percentiles(mooncake):
    n_in = [r.input_tokens for r in mooncake.requests]
    n_out = [r.output_tokens for r in mooncake.requests]
    # The README rounds numpy's default (linear) percentiles to whole tokens.
    assert np.percentile(n_in, [50, 90, 99]) == pytest.approx([6909, 27367, 85400], abs=1)
    assert np.percentile(n_out, [50, 90, 99]) == pytest.approx([350, 597, 1118], abs=1)
    # The README says "max ~ 190k"; the file's largest input is 126,195 tokens.
    assert max(n_in) == 126_195


def test_prefix_block_invariant_and_reuse(mooncake):
    assert all(len(r.prefix_blocks) == blocks_for(r.input_tokens) for r in mooncake.requests)
    seen: set[int] = set()
    reused = total = 0
    for r in mooncake.requests:
        for k, block in enumerate(r.prefix_blocks):
            tokens = min(BLOCK_TOKENS, r.input_tokens - k * BLOCK_TOKENS)
            total += tokens
            reused += tokens * (block in seen)
            seen.add(block)
    assert reused / total == pytest.approx(0.37, abs=0.005)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}, "expected 2"),
        ({"timestamp": 0, "input_length": 600, "output_length": 5}, "missing"),
        ({"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []}, "bad token counts"),
    ],
)
def test_bad_rows_are_rejected_with_their_line(tmp_path, row, message):
    # Synthetic rows, built to break one rule each.
    path = tmp_path / "t.jsonl"
    good = {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=message) as err:
        load_mooncake(path)
    assert "t.jsonl:2" in str(err.value)


def test_synthetic_rows_are_rebased_and_sorted(tmp_path):
    rows = [
        {"timestamp": 5000, "input_length": 513, "output_length": 2, "hash_ids": [3, 4]},
        {"timestamp": 2000, "input_length": 10, "output_length": 1, "hash_ids": [3]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = load_mooncake(path)
    assert [r.arrival_s for r in s.requests] == [0.0, 3.0]
    assert s.requests[1].prefix_blocks == (3, 4)
