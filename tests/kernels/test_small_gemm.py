import pytest
import torch

from service.kernels import small_gemm, stream_gemm
from service.kernels.small_gemm import (
    _FORM_FN,
    AMX_FORMS,
    COLD_CACHE_BYTES,
    FORMS,
    MAX_ROWS,
    STREAM_FORMS,
    GemmPlan,
    available_forms,
    last_level_cache_bytes,
    linear,
    stream,
    time_forms,
    timed_matrices,
    timing_passes,
    weight_major,
)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize(("out_features", "in_features"), [(96, 64), (7, 130), (512, 48)])
def test_weight_major_is_the_product(rows, out_features, in_features):
    g = torch.Generator().manual_seed(rows * 1000 + out_features)
    x = torch.randn(rows, in_features, generator=g)
    w = torch.randn(out_features, in_features, generator=g)
    y = weight_major(x, w)
    assert y.shape == (rows, out_features) and y.is_contiguous()
    torch.testing.assert_close(y, x @ w.t(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(linear(x, w), x @ w.t(), rtol=1e-5, atol=1e-4)
    if rows <= MAX_ROWS:
        for form in STREAM_FORMS:
            if form not in AMX_FORMS:
                torch.testing.assert_close(_FORM_FN[form](x, w), x @ w.t(), rtol=1e-5, atol=1e-4)
            elif stream_gemm.amx_ready():  # bfloat16 weights only
                half = w.to(torch.bfloat16)
                torch.testing.assert_close(_FORM_FN[form](x, half), x @ half.float().t(), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(stream(x, w), x @ w.t(), rtol=1e-5, atol=1e-4)


def test_a_float32_weight_shaped_like_bfloat16_ones_takes_the_first_walk():
    """Forms are kept per shape: where the plan chose an AMX form for a shape (its bfloat16 weights), a float32 weight
    of that shape is multiplied by the first walk."""
    plan = GemmPlan(max_rows=2)
    plan.forms.update({(24, 16, 1): "stream_amx", (24, 16, 2): "stream_amx_pf"})
    x, w = torch.randn(2, 16), torch.randn(24, 16)
    assert torch.equal(plan.mm(x, w), stream(x, w))


def test_an_untuned_plan_is_the_reference():
    x, w = torch.randn(3, 16), torch.randn(24, 16)
    plan = GemmPlan()
    assert plan.form(24, 16, 3) == "linear"
    assert torch.equal(plan.mm(x, w), linear(x, w))


def test_tune_keeps_the_faster_form_per_shape_and_rows():
    calls = []

    def timer(stack, m):  # weight_major faster for 2..4 rows of the wide shape only
        calls.append((tuple(stack.shape), m))
        wide = stack.shape[1] > stack.shape[2]
        return {"linear": 1.0, "weight_major": 0.5 if wide and 2 <= m <= 4 else 2.0}

    wide, tall = torch.zeros(4, 32, 8), torch.zeros(4, 8, 16)
    plan = GemmPlan(max_rows=5).tune([wide, tall, torch.zeros(4, 32, 8)], timer=timer)
    assert [plan.form(32, 8, m) for m in range(1, 6)] == [
        "linear",
        "weight_major",
        "weight_major",
        "weight_major",
        "linear",
    ]
    assert all(plan.form(8, 16, m) == "linear" for m in range(1, 6))
    assert plan.form(32, 8, 6) == "linear"  # beyond max_rows: the reference
    assert len(calls) == 12  # each shape once (one row twice), however often it appears
    assert plan.describe()["32x8"][1] == "weight_major"


def test_one_row_is_timed_again_last_and_each_form_keeps_its_best():
    calls = []

    def timer(stack, m):  # the first timing of one row misjudges weight_major, the second linear
        calls.append(m)
        first = calls.count(1) == 1
        return {"linear": 1.0 if first else 3.0, "weight_major": 2.0 if first else 0.5} if m == 1 else {"linear": 1.0}

    plan = GemmPlan(max_rows=3).tune([torch.zeros(8, 4)], timer=timer)
    assert calls == [1, 2, 3, 1]
    assert plan.describe() == {"8x4": ["weight_major", "linear", "linear"]}
    calls.clear()
    assert GemmPlan(max_rows=1).tune([torch.zeros(8, 4)], timer=timer).form(8, 4, 1) == "linear"
    assert calls == [1]  # a plan of one row count times it once


def test_ties_go_to_the_reference():
    plan = GemmPlan(max_rows=2).tune([torch.zeros(8, 4)], timer=lambda stack, m: dict.fromkeys(FORMS, 1.0))
    assert plan.describe() == {"8x4": ["linear", "linear"]}


def test_a_single_matrix_is_tuned_as_a_stack_of_one():
    plan = GemmPlan(max_rows=1).tune([torch.zeros(8, 4)], timer=lambda stack, m: {"linear": 2.0, "weight_major": 1.0})
    assert plan.form(8, 4, 1) == "weight_major"


def test_a_timing_pass_reads_twice_the_last_level_cache_where_the_stack_holds_it(monkeypatch):
    """So that the plan times products whose weights come from memory, as a step of a model beyond the cache reads
    them; a stack that fits whole is timed whole (warm, as its step reads it), never fewer than 8 matrices."""
    monkeypatch.setattr(small_gemm, "last_level_cache_bytes", lambda: 1 << 20)  # 1 MiB: 2 MiB a pass
    matrix = 64 * 1024  # bytes of one [128, 256] bfloat16 matrix
    assert timed_matrices(torch.empty(100, 128, 256, dtype=torch.bfloat16)) == 2 * (1 << 20) // matrix == 32
    assert timed_matrices(torch.empty(100, 128, 256)) == 16  # float32: twice the bytes, half the matrices
    assert timed_matrices(torch.empty(20, 128, 256, dtype=torch.bfloat16)) == 20  # all it has
    assert timed_matrices(torch.empty(100, 8, 8)) == 100  # 256-byte matrices: all of them, still under 2 MiB
    assert timed_matrices(torch.empty(100, 1024, 1024)) == 8  # 4 MiB each: the floor of 8
    assert timed_matrices(torch.empty(3, 1024, 1024)) == 3
    sized = []
    monkeypatch.setattr(small_gemm, "timed_matrices", lambda stack: sized.append(stack.shape[0]) or 2)
    calls = []
    monkeypatch.setitem(small_gemm._FORM_FN, "linear", lambda x, w: calls.append(w.data_ptr()))
    stack = torch.randn(5, 8, 4)
    time_forms(stack, rows=1, repeats=3, candidates=("linear",))
    assert sized == [5] and calls == [stack[0].data_ptr()] + [stack[0].data_ptr(), stack[1].data_ptr()] * 3
    # more matrices a pass, fewer passes: about as many products per form as 8 a pass made, never fewer than 2 passes
    assert [timing_passes(5, n) for n in (1, 8, 15, 20, 29, 64)] == [5, 5, 3, 2, 2, 2]
    assert timing_passes(1, 64) == 1 and timing_passes(3, 8) == 3


def test_the_last_level_cache_is_read_from_the_os_or_assumed():
    size = last_level_cache_bytes()
    assert size == COLD_CACHE_BYTES or size >= 1 << 20  # what sysfs says of the largest cache, else the default


def test_time_forms_times_every_form():
    times = time_forms(torch.randn(3, 64, 32), rows=2, repeats=2)
    assert set(times) == set(available_forms()) - set(AMX_FORMS) and all(0 < t < 1 for t in times.values())
    assert "stream" in available_forms()  # the C++ kernel builds on the machines this project runs on
    assert set(STREAM_FORMS) - set(AMX_FORMS) <= set(times)
    assert len(STREAM_FORMS) == len(stream_gemm.KINDS) + len(stream_gemm.AMX_KINDS)
    # bfloat16 weights by float32 rows: the stream forms only, the AMX ones where the tiles run here
    bf16 = time_forms(torch.randn(3, 64, 32).to(torch.bfloat16), rows=2, repeats=1, inputs=torch.float32)
    assert set(bf16) == {f for f in STREAM_FORMS if f in available_forms()}
    assert (set(AMX_FORMS) <= set(bf16)) == stream_gemm.amx_ready()
    assert not set(STREAM_FORMS) & set(time_forms(torch.randn(2, 16, 8, dtype=torch.float64), rows=2, repeats=1))
    assert not set(STREAM_FORMS) & set(time_forms(torch.randn(2, 16, 8), rows=17, repeats=1))  # beyond its rows
    assert MAX_ROWS >= 5  # a verify of 4 drafts gives an expert up to 5 rows of one request


@pytest.mark.parametrize(
    ("tokens", "k", "form"),
    [(1, 2, "weight_major"), (5, 3, "weight_major"), (9, 2, "linear"), (1, 2, "stream"), (5, 3, "stream")]
    + [(5, 3, form) for form in STREAM_FORMS[1:] if form not in AMX_FORMS],  # AMX: bfloat16 weights (test_stream_gemm)
)
def test_moe_experts_is_the_reference_moe(tokens, k, form):
    from service.kernels.moe_ref import moe_forward, route_topk
    from service.kernels.small_gemm import moe_experts

    g = torch.Generator().manual_seed(tokens * 10 + k)
    w13, w2 = torch.randn(6, 40, 16, generator=g) / 4, torch.randn(6, 16, 20, generator=g) / 4
    x = torch.randn(tokens, 16, generator=g)
    ids, weights = route_topk(torch.randn(tokens, 6, generator=g), k)
    plan = GemmPlan().tune(
        [w13, w2], timer=lambda s, m: {"linear": 1.0, form: 0.5} if form != "linear" else {"linear": 1.0}
    )
    assert plan.form(40, 16, 1) == form
    torch.testing.assert_close(moe_experts(plan, x, w13, w2, ids, weights), moe_forward(x, w13, w2, ids, weights))


def test_a_form_must_beat_the_reference_by_the_margin():
    from service.kernels.small_gemm import MARGIN

    close = {"linear": 1.0, "stream": 1.0 - MARGIN / 2, "weight_major": 1.2}
    clear = {"linear": 1.0, "stream": 1.0 - 2 * MARGIN, "weight_major": 1.2}
    assert GemmPlan(max_rows=1).tune([torch.zeros(8, 4)], timer=lambda s, m: close).form(8, 4, 1) == "linear"
    assert GemmPlan(max_rows=1).tune([torch.zeros(8, 4)], timer=lambda s, m: clear).form(8, 4, 1) == "stream"


def test_the_plan_names_each_row_counts_form_for_the_fused_moe():
    plan = GemmPlan(max_rows=4, forms={(8, 4, 1): "stream_seq", (8, 4, 2): "weight_major", (8, 4, 3): "stream"})
    assert plan.kinds(8, 4) == [
        stream_gemm.KINDS.index("sequential"),
        stream_gemm.WEIGHT_MAJOR_KIND,
        stream_gemm.KINDS.index("lockstep"),
        stream_gemm.LINEAR_KIND,  # untuned: F.linear
    ]


@pytest.mark.parametrize("tokens", [1, 8, 40])
def test_moe_experts_in_one_call_is_the_python_one(tokens):
    from service.kernels.moe_ref import route_topk
    from service.kernels.small_gemm import moe_experts, moe_experts_python

    g = torch.Generator().manual_seed(tokens)
    w13, w2 = torch.randn(8, 64, 32, generator=g) / 4, torch.randn(8, 32, 32, generator=g) / 4
    x = torch.randn(tokens, 32, generator=g)
    ids, weights = route_topk(torch.randn(tokens, 8, generator=g), 2)
    plan = GemmPlan().tune([w13, w2], timer=lambda s, m: {"linear": 1.0, STREAM_FORMS[m % 4]: 0.5})
    torch.testing.assert_close(
        moe_experts(plan, x, w13, w2, ids, weights), moe_experts_python(plan, x, w13, w2, ids, weights)
    )


def test_the_fused_moes_forms_follow_a_new_tuning():
    plan = GemmPlan(max_rows=2)
    plan.tune([torch.zeros(8, 4)], timer=lambda s, m: {"linear": 1.0, "stream_seq": 0.5})
    assert plan.kinds(8, 4) == [stream_gemm.KINDS.index("sequential")] * 2
    plan.tune([torch.zeros(8, 4)], timer=lambda s, m: {"linear": 1.0, "weight_major": 0.5})
    assert plan.kinds(8, 4) == [stream_gemm.WEIGHT_MAJOR_KIND] * 2


def test_a_cached_plan_is_read_instead_of_timed(tmp_path):
    from service.kernels.plan_cache import PlanCache

    calls = []

    def timer(stack, m):
        calls.append(m)
        return {"linear": 1.0, "weight_major": 0.5 if m == 2 else 2.0}

    first = GemmPlan(max_rows=3, cache=PlanCache(tmp_path)).tune([torch.zeros(8, 4)], timer=timer)
    assert calls == [1, 2, 3, 1] and not first.cached
    again = GemmPlan(max_rows=3, cache=PlanCache(tmp_path)).tune([torch.zeros(8, 4)], timer=timer)
    assert calls == [1, 2, 3, 1], "the second plan was timed again"
    assert again.cached == {(8, 4)}
    assert (
        [again.form(8, 4, m) for m in (1, 2, 3)]
        == ["linear", "weight_major", "linear"]
        == [first.form(8, 4, m) for m in (1, 2, 3)]
    )
    GemmPlan(max_rows=2, cache=PlanCache(tmp_path)).tune([torch.zeros(8, 4)], timer=timer)
    assert calls[4:] == [1, 2, 1], "another row range is another plan"
    GemmPlan(max_rows=3, candidates=("linear",), cache=PlanCache(tmp_path)).tune([torch.zeros(8, 4)], timer=timer)
    assert calls[7:] == [1, 2, 3, 1], "other candidate forms are another plan"


def test_an_unreadable_cached_plan_is_timed_again_and_replaced(tmp_path):
    from service.kernels.plan_cache import PlanCache

    GemmPlan(max_rows=1, cache=PlanCache(tmp_path)).tune([torch.zeros(8, 4)], timer=lambda s, m: {"linear": 1.0})
    (path,) = tmp_path.glob("*.json")
    path.write_text("{not json")
    plan = GemmPlan(max_rows=1, cache=PlanCache(tmp_path)).tune(
        [torch.zeros(8, 4)], timer=lambda s, m: {"linear": 1.0, "weight_major": 0.5}
    )
    assert plan.form(8, 4, 1) == "weight_major" and not plan.cached
    assert '"weight_major"' in path.read_text()


def test_the_machine_key_holds_what_timings_depend_on(monkeypatch):
    from service.kernels import plan_cache

    base = plan_cache.machine_key({"max_rows": 16})
    assert plan_cache.machine_key({"max_rows": 8}) != base
    monkeypatch.setattr(plan_cache, "cpu_model", lambda: "another CPU")
    assert plan_cache.machine_key({"max_rows": 16}) != base
    monkeypatch.undo()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert plan_cache.machine_key({"max_rows": 16}) != base
    finally:
        torch.set_num_threads(threads)
    assert plan_cache.machine_key({"max_rows": 16}) == base


def test_a_folder_that_cannot_be_written_leaves_the_plan_timed(tmp_path, caplog):
    from service.kernels.plan_cache import PlanCache

    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level("WARNING", logger="service.kernels.plan_cache"):
        plan = GemmPlan(max_rows=1, cache=PlanCache(blocker / "plans")).tune(
            [torch.zeros(8, 4)], timer=lambda s, m: {"linear": 1.0}
        )
    assert plan.form(8, 4, 1) == "linear"
    assert not plan.cached  # timed, not read
    assert "not kept" in caplog.text  # the write failed, said so, and the engine went on
