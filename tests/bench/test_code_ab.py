"""bench._code_ab's round rotation and summary, as the scratch A/Bs under bench/results/ use them."""

import pytest

from bench import _code_ab


def test_rounds_rotate_the_pairs_and_the_summary_divides_each_engines_own_rounds(monkeypatch):
    flushed = []
    monkeypatch.setattr(_code_ab, "flush_cache", flushed.append)
    engines = {"old": ("u-old", "m"), "new": ("u-new", "m")}
    variants = {"ms": {"h": "ms"}, "k0": {"h": "k0"}}
    speed = {"u-old": 10.0, "u-new": 20.0}  # each engine instance at its own speed

    def measure(url, served, task, hints):
        return speed[url] * (0.9 if hints["h"] == "ms" else 1.0) * (2.0 if task == "math" else 1.0)

    rows = _code_ab.rotated_rounds(engines, variants, ("code", "math"), 3, measure)
    assert len(rows) == len(flushed) == 3 * 2 * 4
    firsts = [(x["engine"], x["variant"]) for x in rows if x["task"] == "code" and rows.index(x) % 8 == 0]
    assert firsts == [("old", "ms"), ("old", "k0"), ("new", "ms")]  # a different pair leads each round
    summary = _code_ab.ms_over_k0(rows, ("code", "math"), ("old", "new"), 3)
    for task in ("code", "math"):
        for engine in ("old", "new"):
            assert summary[task][f"{engine}_ms_over_k0_rounds"] == pytest.approx([0.9] * 3)
            assert summary[task][f"{engine}_ms_over_k0_median"] == pytest.approx(0.9)
