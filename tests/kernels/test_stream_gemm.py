"""The stream GEMM kernel (service/kernels/csrc/stream_gemm.cpp) against torch's product, on every ISA this CPU
runs, with the shapes that exercise its tails (features not a multiple of the vector width, outputs not a multiple
of the rows it takes at a time)."""

import platform

import pytest
import torch

from service.kernels import stream_gemm


@pytest.fixture(scope="module", autouse=True)
def built():
    assert stream_gemm.load(), stream_gemm.error()  # g++ and ninja are part of the machines this project runs on


def test_the_cpu_is_asked():
    isas = stream_gemm.supported_isas()
    assert isas[0] == stream_gemm.best_isa() and isas[-1] == "base"
    assert isas == [isa for isa in stream_gemm.ISAS if isa in isas]  # widest first, nothing skipped in between


@pytest.mark.parametrize("rows", range(1, stream_gemm.MAX_ROWS + 1))
@pytest.mark.parametrize(("out_features", "in_features"), [(9, 256), (37, 130), (4, 7), (1, 33), (256, 4608)])
def test_every_isa_computes_the_product(rows, out_features, in_features):
    g = torch.Generator().manual_seed(rows * 100 + out_features)
    x = torch.randn(rows, in_features, generator=g)
    w = torch.randn(out_features, in_features, generator=g)
    expected = x.double() @ w.double().t()
    for isa in stream_gemm.supported_isas():
        for kind in range(len(stream_gemm.KINDS)):
            y = stream_gemm.stream_linear(x, w, isa, kind)
            assert y.shape == (rows, out_features) and y.dtype == torch.float32 and y.is_contiguous()
            torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-4 * in_features**0.5)


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 16])
@pytest.mark.parametrize(("out_features", "in_features"), [(9, 256), (37, 130), (4, 7), (256, 4608)])
def test_bfloat16_weights_are_multiplied_as_their_float32_values(rows, out_features, in_features):
    """A bfloat16 weight is widened to float32 exactly before it multiplies: the product equals the one on its float32
    copy bit for bit (same walk, same sums), on every ISA and walk, tails included."""
    g = torch.Generator().manual_seed(rows * 10 + in_features)
    x = torch.randn(rows, in_features, generator=g)
    w = torch.randn(out_features, in_features, generator=g).to(torch.bfloat16)
    for isa in stream_gemm.supported_isas():
        for kind in range(len(stream_gemm.KINDS)):
            got = stream_gemm.stream_linear(x, w, isa, kind)
            assert torch.equal(got, stream_gemm.stream_linear(x, w.float(), isa, kind)), (isa, kind)


def test_views_are_read_as_their_values():
    w = torch.randn(64, 48)[::2]  # every other row: not contiguous
    x = torch.randn(48, 3).t()  # transposed
    torch.testing.assert_close(stream_gemm.stream_linear(x, w), x @ w.t(), rtol=1e-5, atol=1e-4)


def test_threads_split_the_outputs_not_the_result():
    x, w = torch.randn(5, 256), torch.randn(4096, 256)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert stream_gemm.threads() == 1
        one = stream_gemm.stream_linear(x, w)
        torch.set_num_threads(2)
        # the library's parallel_for runs on torch's threads (compiled with OpenMP; without it, on one thread)
        assert stream_gemm.threads() == 2
        two = stream_gemm.stream_linear(x, w)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)  # each output is one thread's dot product: same order, same bits


def test_threads_split_the_moe_op_not_its_result():
    """stream_moe (every walk, experts hit by 1 to 12 rows) gives the same bits on one thread and on two: each thread
    computes whole outputs."""
    g = torch.Generator().manual_seed(7)
    experts, hidden, inter, k = 8, 64, 96, 2
    w13 = torch.randn(experts, 2 * inter, hidden, generator=g).to(torch.bfloat16)
    w2 = torch.randn(experts, hidden, inter, generator=g).to(torch.bfloat16)
    x = torch.randn(12, hidden, generator=g)
    ids = torch.randint(0, experts, (12, k), generator=g)
    weights = torch.rand(12, k, generator=g)
    before = torch.get_num_threads()
    try:
        for kind in range(len(stream_gemm.KINDS)):
            kinds = [kind] * stream_gemm.MAX_ROWS
            torch.set_num_threads(1)
            one = stream_gemm.stream_moe(x, w13, w2, ids, weights, kinds, kinds)
            torch.set_num_threads(2)
            assert torch.equal(one, stream_gemm.stream_moe(x, w13, w2, ids, weights, kinds, kinds)), kind
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("isa", stream_gemm.supported_isas())
@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize(
    "ids",
    [
        [[0], [3], [5]],  # three experts of one row: two run whole on a thread each, the third split
        [[2], [2], [6], [1]],  # two rows on one expert, one on two others
        [[4]] * 17 + [[0], [1], [7]],  # past the plan's rows on expert 4: not a walk, the rest as above
    ],
)
def test_experts_run_whole_on_two_threads_as_on_one(isa, bf16, ids):
    """With two threads stream_moe runs the walked experts of an even count whole, one thread each, and splits the
    products of the rest (an odd one, one past the plan's rows): the bits of one thread, and the reference MoE."""
    from service.kernels.moe_ref import moe_forward

    g = torch.Generator().manual_seed(len(ids))
    w13, w2 = torch.randn(8, 2 * 40, 36, generator=g) / 4, torch.randn(8, 36, 40, generator=g) / 4
    if bf16:
        w13, w2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16)
    ids_t = torch.tensor(ids)
    x, weights = torch.randn(len(ids), 36, generator=g), torch.rand(len(ids), 1, generator=g)
    kinds = [stream_gemm.KINDS.index("split4")] * stream_gemm.MAX_ROWS
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = stream_gemm.stream_moe(x, w13, w2, ids_t, weights, kinds, kinds, isa)
        torch.set_num_threads(2)
        two = stream_gemm.stream_moe(x, w13, w2, ids_t, weights, kinds, kinds, isa)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    want = moe_forward(x, w13.float(), w2.float(), ids_t, weights)
    torch.testing.assert_close(two, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("x", "w", "isa", "message"),
    [
        (torch.randn(stream_gemm.MAX_ROWS + 1, 8), torch.randn(4, 8), None, f"1..{stream_gemm.MAX_ROWS} rows"),
        (torch.randn(0, 8), torch.randn(4, 8), None, f"1..{stream_gemm.MAX_ROWS} rows"),
        (torch.randn(2, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64), None, "float32"),
        (torch.randn(2, 8), torch.randn(4, 9), None, "features"),
        (torch.randn(2, 8), torch.randn(4, 8), "neon", "unknown isa"),
        (torch.randn(8), torch.randn(4, 8), None, "expected"),
    ],
)
def test_bad_input_is_refused_with_the_reason(x, w, isa, message):
    with pytest.raises(RuntimeError, match=message):
        stream_gemm.stream_linear(x, w, isa)


@pytest.mark.parametrize("kind", [-1, len(stream_gemm.KINDS) + len(stream_gemm.AMX_KINDS)])
def test_an_unknown_walk_is_refused(kind):
    with pytest.raises(RuntimeError, match="unknown kind"):
        stream_gemm.stream_linear(torch.randn(2, 8), torch.randn(4, 8), None, kind)


AMX = pytest.mark.skipif(not stream_gemm.amx_ready(), reason="this CPU or its kernel runs no AMX tiles")
AMX_FORMS = [stream_gemm.AMX_KIND, stream_gemm.AMX_PREFETCH_KIND]


def test_amx_is_asked_of_the_cpu():
    flags = set()
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if not {"amx_tile", "amx_bf16"} <= flags:
        assert not stream_gemm.amx_ready()  # never assumed where the CPU does not say so
    elif tuple(int(v) for v in platform.release().split(".")[:2]) >= (5, 16):
        assert stream_gemm.amx_ready()  # the CPU says so and the kernel grants tiles (ARCH_REQ_XCOMP_PERM, 5.16+)


@AMX
@pytest.mark.parametrize("rows", [*range(1, stream_gemm.MAX_ROWS + 1), 17, 31, 32, 33, 100])
@pytest.mark.parametrize(("out_features", "in_features"), [(9, 256), (37, 130), (4, 7), (1, 33), (256, 4608)])
def test_the_amx_forms_compute_the_product(rows, out_features, in_features):
    """Tails of both kinds (features not a whole block of 16, weights not a whole 32) through the zero-padded tiles;
    past 16 rows the pieces of 16 (the last one a remainder) under each weight block, in groups (w2-shaped weights)."""
    g = torch.Generator().manual_seed(rows * 100 + out_features)
    x = torch.randn(rows, in_features, generator=g)
    w = torch.randn(out_features, in_features, generator=g).to(torch.bfloat16)
    expected = x.double() @ w.double().t()
    for kind in AMX_FORMS:
        y = stream_gemm.stream_linear(x, w, None, kind)
        assert y.shape == (rows, out_features) and y.dtype == torch.float32 and y.is_contiguous()
        torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-4 * in_features**0.5)


@AMX
@pytest.mark.parametrize("rows", [1, 7, 16, 40])
def test_the_amx_forms_keep_every_bit_of_the_rows(rows):
    """An identity weight gives back x itself bit for bit: the three bfloat16 parts of each float32 value add up to it
    exactly (two parts would keep 16 of its 24 significant bits); non-finite values multiply as in float32."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 48, generator=g) * torch.logspace(-20, 20, 48)
    eye = torch.eye(48).to(torch.bfloat16)
    infinite = x.clone()
    infinite[0, 3], infinite[-1, 5] = float("inf"), float("-inf")
    for kind in AMX_FORMS:
        assert torch.equal(stream_gemm.stream_linear(x, eye, None, kind), x), kind
        got = stream_gemm.stream_linear(infinite, eye, None, kind)  # inf * 0 is nan, as in float32
        torch.testing.assert_close(got, infinite @ eye.float().t(), rtol=0, atol=0, equal_nan=True)


@AMX
@pytest.mark.parametrize("rows", [5, 40])
def test_the_amx_forms_split_the_outputs_not_the_result(rows):
    x, w = torch.randn(rows, 256), torch.randn(4099, 256).to(torch.bfloat16)
    before = torch.get_num_threads()
    try:
        for kind in AMX_FORMS:
            torch.set_num_threads(1)
            one = stream_gemm.stream_linear(x, w, None, kind)
            torch.set_num_threads(2)
            assert torch.equal(one, stream_gemm.stream_linear(x, w, None, kind)), kind
    finally:
        torch.set_num_threads(before)


def test_only_the_amx_forms_take_more_than_the_plans_rows():
    x, w = torch.randn(stream_gemm.MAX_ROWS + 1, 32), torch.randn(4, 32).to(torch.bfloat16)
    for kind in range(len(stream_gemm.KINDS)):
        with pytest.raises(RuntimeError, match=f"1..{stream_gemm.MAX_ROWS} rows"):
            stream_gemm.stream_linear(x, w, None, kind)


@pytest.mark.parametrize("kind", AMX_FORMS)
def test_the_amx_forms_refuse_float32_weights(kind):
    with pytest.raises(RuntimeError, match="bfloat16 weights only"):
        stream_gemm.stream_linear(torch.randn(2, 32), torch.randn(4, 32), None, kind)


@pytest.mark.skipif(stream_gemm.amx_ready(), reason="this CPU runs AMX tiles")
def test_the_amx_forms_are_refused_where_the_cpu_has_none():
    with pytest.raises(RuntimeError, match="cannot run the AMX form"):
        stream_gemm.stream_linear(torch.randn(2, 32), torch.randn(4, 32).to(torch.bfloat16), None, AMX_FORMS[0])


def _routing(tokens, experts, k, seed):
    from service.kernels.moe_ref import route_topk

    g = torch.Generator().manual_seed(seed)
    return route_topk(torch.randn(tokens, experts, generator=g), k)


# every form stream_moe takes: the walks, F.linear and the weight-major product
MOE_KINDS = [*range(len(stream_gemm.KINDS)), stream_gemm.LINEAR_KIND, stream_gemm.WEIGHT_MAJOR_KIND]


@pytest.mark.parametrize("isa", stream_gemm.supported_isas())
@pytest.mark.parametrize(("tokens", "k"), [(1, 2), (3, 1), (7, 3), (40, 2)])
def test_stream_moe_is_the_reference_moe(isa, tokens, k):
    """Every expert hit in the form its row count is given (a different one for each count, F.linear past the lists),
    against moe_ref's expert forward: 40 tokens top-2 over 5 experts give some expert more than 16 rows."""
    from service.kernels.moe_ref import moe_forward

    g = torch.Generator().manual_seed(tokens * 7 + k)
    w13, w2 = torch.randn(5, 2 * 24, 20, generator=g) / 4, torch.randn(5, 20, 24, generator=g) / 4
    x = torch.randn(tokens, 20, generator=g)
    ids, weights = _routing(tokens, 5, k, seed=tokens + k)
    kinds13 = [MOE_KINDS[m % len(MOE_KINDS)] for m in range(stream_gemm.MAX_ROWS)]
    kinds2 = [MOE_KINDS[(m + 3) % len(MOE_KINDS)] for m in range(stream_gemm.MAX_ROWS)]
    got = stream_gemm.stream_moe(x, w13, w2, ids, weights, kinds13, kinds2, isa)
    torch.testing.assert_close(got, moe_forward(x, w13, w2, ids, weights), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", stream_gemm.supported_isas())
@pytest.mark.parametrize("bf16", [False, True])
def test_a_slot_of_weight_zero_is_not_run(isa, bf16):
    """An expert budget's dropped slots (weight 0, pointed at an in-budget expert) cost no expert rows: with expert 0's
    weights all NaN and every slot on it at weight 0, the result is finite and the reference MoE without expert 0; a
    token whose first slot has weight 0 too. The other slots' bits are those of the same call with expert 0 finite."""
    from service.kernels.moe_ref import moe_forward

    g = torch.Generator().manual_seed(11)
    w13, w2 = torch.randn(5, 2 * 24, 20, generator=g) / 4, torch.randn(5, 20, 24, generator=g) / 4
    x = torch.randn(9, 20, generator=g)
    ids, weights = _routing(9, 5, 3, seed=5)
    dropped = ids == 0
    ids[0] = torch.tensor([0, 1, 2])  # token 0: its first slot dropped
    dropped[0] = torch.tensor([True, False, False])
    weights = torch.where(dropped, torch.zeros_like(weights), weights)
    assert bool(dropped.any()) and not bool(dropped.all(dim=1).any())
    poisoned13, poisoned2 = w13.clone(), w2.clone()
    poisoned13[0], poisoned2[0] = float("nan"), float("nan")
    if bf16:
        w13, w2, poisoned13, poisoned2 = (w.to(torch.bfloat16) for w in (w13, w2, poisoned13, poisoned2))
    kinds = [MOE_KINDS[m % len(MOE_KINDS)] for m in range(stream_gemm.MAX_ROWS)]
    got = stream_gemm.stream_moe(x, poisoned13, poisoned2, ids, weights, kinds, kinds, isa)
    assert bool(got.isfinite().all())
    assert torch.equal(got, stream_gemm.stream_moe(x, w13, w2, ids, weights, kinds, kinds, isa))
    mask = torch.ones(5, dtype=torch.bool)
    mask[0] = False
    want = moe_forward(x, poisoned13.float(), poisoned2.float(), ids, weights, expert_mask=mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", stream_gemm.supported_isas())
def test_stream_moe_multiplies_bfloat16_weights_as_their_float32_values(isa):
    """Every form (walks, F.linear and the weight-major product on a widened copy, F.linear past 16 rows): the output on
    bfloat16 weights equals the one on their float32 copies bit for bit."""
    g = torch.Generator().manual_seed(5)
    w13, w2 = torch.randn(5, 2 * 24, 20, generator=g) / 4, torch.randn(5, 20, 24, generator=g) / 4
    w13, w2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16)
    x = torch.randn(40, 20, generator=g)
    ids, weights = _routing(40, 5, 2, seed=9)
    kinds13 = [MOE_KINDS[m % len(MOE_KINDS)] for m in range(stream_gemm.MAX_ROWS)]
    kinds2 = [MOE_KINDS[(m + 3) % len(MOE_KINDS)] for m in range(stream_gemm.MAX_ROWS)]
    for tokens in (1, 3, 40):
        args = (ids[:tokens], weights[:tokens], kinds13, kinds2, isa)
        got = stream_gemm.stream_moe(x[:tokens], w13, w2, *args)
        assert torch.equal(got, stream_gemm.stream_moe(x[:tokens], w13.float(), w2.float(), *args)), tokens


def test_float32_experts_given_an_amx_form_take_the_first_walk():
    """A plan keys its forms by shape: float32 experts shaped like bfloat16 ones it gave AMX forms (a STANDALONE
    Mixtral draft beside its target) are multiplied by the first walk, the same bits as given it directly."""
    g = torch.Generator().manual_seed(11)
    w13, w2 = torch.randn(3, 2 * 24, 40, generator=g) / 4, torch.randn(3, 40, 24, generator=g) / 4
    x = torch.randn(9, 40, generator=g)
    ids, weights = _routing(9, 3, 2, seed=4)
    amx = [AMX_FORMS[m % 2] for m in range(stream_gemm.MAX_ROWS)]
    got = stream_gemm.stream_moe(x, w13, w2, ids, weights, amx, amx)
    first = [0] * stream_gemm.MAX_ROWS
    assert torch.equal(got, stream_gemm.stream_moe(x, w13, w2, ids, weights, first, first))


@pytest.mark.parametrize("tokens", [30, 120])  # hits of 17-32 rows; past 32
def test_bfloat16_experts_past_the_plans_rows_are_multiplied_in_pieces(tokens):
    """A plan of walks only (a bfloat16 weight's) and expert hits of more than 16 rows: up to 32 rows the walks run
    over pieces of at most 16 rows (no float32 copy of the weight), beyond it F.linear on a widened copy; both are the
    reference MoE on the widened weights, to rounding."""
    from service.kernels.moe_ref import moe_forward

    g = torch.Generator().manual_seed(tokens)
    w13, w2 = torch.randn(3, 2 * 24, 20, generator=g) / 4, torch.randn(3, 20, 24, generator=g) / 4
    w13, w2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16)
    x = torch.randn(tokens, 20, generator=g)
    ids, weights = _routing(tokens, 3, 2, seed=tokens)
    assert int(torch.bincount(ids.flatten()).max()) > stream_gemm.MAX_ROWS  # some hit past the plan's rows
    walks = [m % len(stream_gemm.KINDS) for m in range(stream_gemm.MAX_ROWS)]
    got = stream_gemm.stream_moe(x, w13, w2, ids, weights, walks, walks[::-1])
    torch.testing.assert_close(got, moe_forward(x, w13.float(), w2.float(), ids, weights), rtol=1e-5, atol=1e-5)


@AMX
@pytest.mark.parametrize(("tokens", "k"), [(1, 2), (7, 3), (30, 2), (120, 2)])
def test_stream_moe_runs_bfloat16_experts_on_amx_tiles(tokens, k):
    """Every expert hit in an AMX form (past the plan's rows, whose 16-row forms are AMX forms, one tile product of
    all the hit's rows per weight: 30 tokens top-2 over 3 experts give hits of 17-32 rows, 120 of more) is the
    reference MoE on the widened weights, to rounding."""
    from service.kernels.moe_ref import moe_forward

    g = torch.Generator().manual_seed(tokens * 3 + k)
    w13, w2 = torch.randn(3, 2 * 24, 40, generator=g) / 4, torch.randn(3, 40, 24, generator=g) / 4
    w13, w2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16)
    x = torch.randn(tokens, 40, generator=g)
    ids, weights = _routing(tokens, 3, k, seed=tokens)
    forms = [AMX_FORMS[m % 2] for m in range(stream_gemm.MAX_ROWS)]
    got = stream_gemm.stream_moe(x, w13, w2, ids, weights, forms, forms[::-1])
    torch.testing.assert_close(got, moe_forward(x, w13.float(), w2.float(), ids, weights), rtol=1e-5, atol=1e-5)


def test_stream_moe_reads_views_and_int32_ids():
    from service.kernels.moe_ref import moe_forward

    w13, w2 = torch.randn(4, 32, 12).transpose(1, 2).contiguous().transpose(1, 2), torch.randn(4, 12, 16)
    x = torch.randn(6, 24)[:, ::2]  # strided rows
    ids, weights = _routing(6, 4, 2, seed=3)
    got = stream_gemm.stream_moe(x, w13, w2, ids.to(torch.int32), weights, [0] * 16, [3] * 16)
    torch.testing.assert_close(got, moe_forward(x.contiguous(), w13, w2, ids, weights), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(ids=torch.tensor([[0, 4]])), "out of"),
        (dict(w2=torch.randn(4, 12, 15)), "do not fit"),
        (dict(x=torch.randn(1, 12, dtype=torch.float64)), "float32"),
        (dict(w2=torch.randn(4, 12, 8, dtype=torch.bfloat16)), "float32 or both bfloat16"),
        (dict(w13=torch.randn(4, 16, 12, dtype=torch.float64), w2=torch.randn(4, 12, 8, dtype=torch.float64)), "both"),
        (dict(weights=torch.ones(1, 3)), r"\[T, k\]"),
        (dict(kinds13=[len(stream_gemm.KINDS) + len(stream_gemm.AMX_KINDS)] * 16), "unknown kind"),
        (dict(isa="neon"), "unknown isa"),
    ],
)
def test_stream_moe_refuses_bad_input_with_the_reason(change, message):
    args = dict(
        x=torch.randn(1, 12), w13=torch.randn(4, 16, 12), w2=torch.randn(4, 12, 8), ids=torch.tensor([[0, 3]]),
        weights=torch.ones(1, 2), kinds13=[0] * 16, kinds2=[0] * 16, isa=None,
    )  # fmt: skip
    args.update(change)
    with pytest.raises(RuntimeError, match=message):
        stream_gemm.stream_moe(*args.values())
