"""The client-side timing of bench/_load.py: TPOT from first and last text, ITL from the gaps between chunks."""

import pytest

from bench import _load
from bench._load import Completion


def test_tpot_and_itl_of_one_request():
    # first token at 0.5 s, then steps of 0.1 s with one 1.0 s stall (another request's prefill)
    chunks = (0.5, 1.5, 1.6, 1.7, 1.8)
    c = Completion(ttft_s=0.5, e2e_s=1.8, output_tokens=5, chunk_s=chunks)
    assert c.tpot_s == pytest.approx(1.3 / 4)  # the stall is in TPOT
    assert c.itl_s == pytest.approx(0.1)  # not in the median gap


def test_a_single_chunk_has_no_itl():
    assert Completion(ttft_s=0.2, e2e_s=0.2, output_tokens=1, chunk_s=(0.2,)).itl_s is None


def test_run_batch_averages_itl_over_requests(monkeypatch):
    done = iter(
        [
            Completion(ttft_s=0.1, e2e_s=0.4, output_tokens=4, chunk_s=(0.1, 0.2, 0.3, 0.4)),
            Completion(ttft_s=0.1, e2e_s=0.1, output_tokens=4, chunk_s=(0.1,)),  # all four tokens in one chunk
            Completion(ttft_s=0.1, e2e_s=0.7, output_tokens=4, chunk_s=(0.1, 0.3, 0.5, 0.7)),
        ]
    )
    monkeypatch.setattr(_load, "complete", lambda *args, **kwargs: next(done))
    result = _load.run_batch("http://unused", "m", ["a", "b", "c"], 4, concurrency=1)
    assert result["itl_ms"] == pytest.approx(150.0)  # requests without a gap do not count
    assert result["tpot_ms"] == pytest.approx((100 + 0 + 200) / 3)
