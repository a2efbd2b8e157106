"""bench.attention_ops runs every variant on every case and times SGLang's rope against the tables path."""

from bench import attention_ops


def test_every_case_times_every_variant():
    rows = attention_ops.measure(rounds=1, reps=1)
    assert [(r["op"], r["batch"], r["tokens"], r["prefix"]) for r in rows] == list(attention_ops.CASES)
    for row in rows:
        assert all(row[f"{name}_ms"] > 0 for name in ("loop", "batched", "fused"))
        assert row["fused_ratio"] == row["fused_ms"] / row["loop_ms"]


def test_rope_rows_compare_sglangs_path_with_the_tables():
    rows = attention_ops.measure_rope(rounds=1, reps=1)
    assert [r["tokens"] for r in rows] == [1, 8, 32]
    assert all(r["sglang_ms"] > 0 and r["ratio"] == r["tables_ms"] / r["sglang_ms"] for r in rows)
