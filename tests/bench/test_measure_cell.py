"""bench.policies' measurement (bench._cell): waves interleave across variants, and a round merges a variant's waves."""

from types import SimpleNamespace

import pytest

from bench import _cell as cell


def test_waves_interleave_across_variants_and_merge(monkeypatch):
    calls = []

    def fake_run(url, model, prompts, tokens, batch, extra):
        calls.append((url, tuple(prompts)))
        n = len(prompts)
        tpot = 10.0 if url == "a" else 20.0
        return {
            "requests": n,
            "tpot_ms": tpot * prompts[0],
            "tpot_p90_ms": tpot * prompts[0],
            "ttft_ms": 1.0,
            "e2e_per_token_ms": tpot,
            "tokens_per_s": 4.0,
            "tokens": 4 * n,
            "wall_s": 1.0 * n,
        }

    monkeypatch.setattr(cell, "run_batch", fake_run)
    monkeypatch.setattr(cell, "served_model", lambda url: "m")
    monkeypatch.setattr(cell, "flush_cache", lambda url: None)
    runs = cell.measure_cell({"A": ("a", None), "B": ("b", None)}, [1, 2, 3], 8, 1, 2)
    # round 0: wave 0 A then B, wave 1 B then A (rotated by the wave), wave 2 A then B; round 1 starts with B
    assert [c[0] for c in calls[:6]] == ["a", "b", "b", "a", "a", "b"]
    assert [c[0] for c in calls[6:8]] == ["b", "a"]
    assert [c[1] for c in calls[:6:2]] == [(1,), (2,), (3,)]
    assert len(runs["A"]) == len(runs["B"]) == 2
    a = runs["A"][0]
    assert a["requests"] == 3
    assert a["tpot_ms"] == pytest.approx(10.0 * (1 + 2 + 3) / 3)
    assert a["tpot_p90_ms"] == 30.0  # the worst wave's
    assert a["tokens_per_s"] == pytest.approx(12 / 3.0)
    assert a["steal_share"] is None  # no wave measured it


def test_steal_share_is_weighted_by_wall_time_and_ranged_over_rounds():
    waves = [
        {"requests": 8, "tpot_ms": 40.0, "tpot_p90_ms": 41.0, "ttft_ms": 1.0, "e2e_per_token_ms": 40.0,
         "tokens": 256, "wall_s": 3.0, "steal_share": 0.04},
        {"requests": 8, "tpot_ms": 44.0, "tpot_p90_ms": 45.0, "ttft_ms": 1.0, "e2e_per_token_ms": 44.0,
         "tokens": 256, "wall_s": 1.0, "steal_share": 0.0},
    ]  # fmt: skip
    merged = cell.merged(waves)
    assert merged["steal_share"] == pytest.approx(0.03)
    [row] = cell.cell_rows({"A": [merged, waves[1], waves[0]]}, batch=8)
    assert row["steal_share"] == pytest.approx(0.03)
    assert (row["steal_share_min"], row["steal_share_max"]) == (0.0, 0.04)


def test_one_wave_is_its_own_measurement(monkeypatch):
    result = {"requests": 8, "tpot_ms": 5.0, "tpot_p90_ms": 6.0, "ttft_ms": 1.0, "e2e_per_token_ms": 5.0}
    assert cell.merged([result]) is result


@pytest.mark.parametrize(
    ("statuses", "wait_s", "posts", "fails"),
    [
        ([200], 10.0, 1, False),
        ([404], 10.0, 1, False),  # an engine without the endpoint (vLLM): nothing to flush
        ([400, 400, 200], 10.0, 3, False),  # a finished request still in SGLang's running batch: asked again
        ([400] * 1000, 0.2, None, True),  # still refused when the wait is over
        ([500, 200], 10.0, 1, True),  # any other answer is an error at once
    ],
)
def test_flush_cache_waits_for_requests_sglang_still_holds(monkeypatch, statuses, wait_s, posts, fails):
    answers = iter(statuses)
    seen = []
    monkeypatch.setattr(
        cell.httpx, "post", lambda url, timeout: seen.append(url) or SimpleNamespace(status_code=next(answers))
    )
    clock = [0.0]  # a fake clock: each sleep passes its time at once
    monkeypatch.setattr(
        cell, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    )
    if fails:
        with pytest.raises(RuntimeError, match="flush_cache failed"):
            cell.flush_cache("http://e", wait_s=wait_s)
    else:
        cell.flush_cache("http://e", wait_s=wait_s)
    assert set(seen) == {"http://e/flush_cache"}
    if posts is not None:
        assert len(seen) == posts


def test_each_request_is_kept_per_round(monkeypatch):
    """A wave's mean hides one request that a later prefill stalls; the rows keep every request's timing per round."""

    def fake_run(url, model, prompts, tokens, batch, extra):
        rows = [[1000.0, 40.0 + p, 900.0 if p == 1 else 30.0, 900.0 if p == 1 else 35.0, 32] for p in prompts]
        return {"requests": len(prompts), "per_request": rows, "tpot_ms": 40.0, "tpot_p90_ms": 41.0, "ttft_ms": 1.0,
                "e2e_per_token_ms": 40.0, "tokens": 32 * len(prompts), "wall_s": 2.0, "itl_ms": 30.0}  # fmt: skip

    monkeypatch.setattr(cell, "run_batch", fake_run)
    monkeypatch.setattr(cell, "served_model", lambda url: "m")
    monkeypatch.setattr(cell, "flush_cache", lambda url: None)
    runs = cell.measure_cell({"A": ("a", None)}, [1, 2, 3], 8, 1, 2)
    [row] = cell.cell_rows(runs, batch=1)
    assert row["rounds"] == 2 and "per_request" not in row
    assert [[r[1] for r in rnd] for rnd in row["per_request_rounds"]] == [[41.0, 42.0, 43.0]] * 2
    assert row["per_request_rounds"][0][0][2] == 900.0  # the stalled request's first gap
