from __future__ import annotations

import pytest

from service.offload.lookahead import ExpertLookaheadBuffer


def _filled() -> ExpertLookaheadBuffer:
    buffer = ExpertLookaheadBuffer(num_layers=2, num_experts=4)
    buffer.add_token([[0, 1], [2, 3]], [[0.6, 0.4], [0.9, 0.1]])
    buffer.add_token([[1, 2], [2, 0]], [[0.7, 0.3], [0.8, 0.2]])
    return buffer


def test_holds_k_by_l_by_topk_cells():
    buffer = _filled()
    assert buffer.num_tokens == 2 and len(buffer.entries()) == 2 * 2 * 2
    assert [e.token for e in buffer.entries(range(1, 2))] == [1, 1, 1, 1]


def test_pending_is_in_verify_order_with_best_confidence_first():
    buffer = _filled()
    assert buffer.pending() == [(0, 1), (0, 0), (0, 2), (1, 2), (1, 0), (1, 3)]
    assert buffer.pending(min_confidence=0.5) == [(0, 1), (0, 0), (1, 2)]
    assert buffer.pending(range(0, 1)) == [(0, 0), (0, 1), (1, 2), (1, 3)]


def test_next_use_follows_the_verify_cursor():
    buffer = _filled()
    assert buffer.next_use((0, 1)) == 0 and buffer.next_use((1, 2)) == 1 and buffer.next_use((0, 3)) is None
    buffer.advance(1)
    assert buffer.next_use((0, 1)) is None and buffer.next_use((1, 2)) == 0
    assert buffer.pending() == [(1, 2), (1, 0), (1, 3)]
    buffer.advance(0)  # the cursor never moves back within a window
    assert buffer.next_use((0, 1)) is None
    buffer.begin_window()
    assert buffer.num_tokens == 0 and buffer.next_use((1, 2)) is None


@pytest.mark.parametrize(
    "ids,confs,match",
    [([[0, 1]], [[0.5, 0.5]], "one routing per layer"), ([[0, 1], [4, 0]], [[0.5, 0.5], [0.5, 0.5]], "out of range")],
)
def test_bad_rows_are_rejected(ids, confs, match):
    with pytest.raises(ValueError, match=match):
        ExpertLookaheadBuffer(2, 4).add_token(ids, confs)
