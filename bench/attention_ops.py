"""The CPU attention ops alone: per-request loop (`*_loop`, the reference), the torch-op versions that batch a step's
requests (service/kernels/attention_cpu.py) and the fused ones the engine registers by default
(service/kernels/attention_fused.py), on engine-like shapes of the bundled model (4 heads of 64, fp32 pool): decode
at batch 1 and 8, a 4-token verify extend at batch 1 and 8, a 96-token prefill at batch 1 and 8.

The rotary embedding that precedes the op in each layer is timed the same way: SGLang's native path vs the tables
path the CPU engine installs (moe_sglang/cpu_rope.py), queries and keys of the same shapes, per layer call.

In-process and single-threaded; the variants take turns round by round (order rotated) and each keeps its best round
(other jobs on a shared machine only add time). Times are per call, i.e. per layer of one step; ratios are to the
loop.

    python -m bench.attention_ops [--rounds 7] [--reps 10] [--out DIR]
"""

from __future__ import annotations

import argparse
import time

import torch

from bench._common import cpu_info, out_dir, table, write_json
from service.kernels.attention_cpu import (
    decode_attention_cpu,
    decode_attention_loop,
    extend_attention_cpu,
    extend_attention_loop,
)
from service.kernels.attention_fused import decode_attention_fused, extend_attention_fused

HEADS, DIM, POOL = 4, 64, 8192
CASES = (  # (op, batch, new tokens per request, cached prefix)
    ("decode", 1, 1, 120),
    ("decode", 8, 1, 30),
    ("decode", 8, 1, 120),
    ("extend", 1, 4, 120),
    ("extend", 8, 4, 30),
    ("extend", 8, 4, 120),
    ("extend", 1, 96, 0),
    ("extend", 8, 96, 0),
)


def _args(kind: str, bs: int, new: int, prefix: int, g: torch.Generator):
    k_buffer, v_buffer = torch.randn(POOL, HEADS, DIM, generator=g), torch.randn(POOL, HEADS, DIM, generator=g)
    req_to_token = torch.randperm(POOL, generator=g).view(32, 256).int()
    pools = torch.arange(bs)
    if kind == "decode":
        seq = torch.full((bs,), prefix + 1)
        loc = req_to_token[:bs, prefix].long()

        def make():
            q, key, value = (torch.randn(bs, HEADS, DIM, generator=g) for _ in range(3))
            return (q, k_buffer, v_buffer, 1.0, 1.0, torch.empty(bs, HEADS, DIM), key, value, loc, torch.empty(1),
                    req_to_token, pools, seq, 0.125, 0.0, False, 0, None, None)  # fmt: skip

        return make
    seq = torch.full((bs,), prefix + new)
    ext = torch.full((bs,), new, dtype=torch.int32)
    starts = torch.arange(bs, dtype=torch.int32) * new

    def make():
        q, key, value = (torch.randn(bs * new, HEADS, DIM, generator=g) for _ in range(3))
        return (q, key, value, torch.empty(bs * new, HEADS, DIM), k_buffer, v_buffer, 1.0, 1.0, req_to_token, pools,
                seq, ext, starts, new, 0.125, 0.0, False, 0, None, None, None, True)  # fmt: skip

    return make


def measure(rounds: int, reps: int) -> list[dict]:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    rows = []
    for kind, bs, new, prefix in CASES:
        ops = {
            "decode": {"loop": decode_attention_loop, "batched": decode_attention_cpu, "fused": decode_attention_fused},
            "extend": {"loop": extend_attention_loop, "batched": extend_attention_cpu, "fused": extend_attention_fused},
        }[kind]
        make = _args(kind, bs, new, prefix, g)
        best = dict.fromkeys(ops, float("inf"))
        names = list(ops)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                args = make()
                ops[name](*args)
                start = time.perf_counter()
                for _ in range(reps):
                    ops[name](*args)
                best[name] = min(best[name], (time.perf_counter() - start) / reps * 1e3)
        rows.append(
            {
                "op": kind,
                "batch": bs,
                "tokens": new,
                "prefix": prefix,
                **{f"{name}_ms": best[name] for name in names},
                "batched_ratio": best["batched"] / best["loop"],
                "fused_ratio": best["fused"] / best["loop"],
            }
        )
    return rows


def measure_rope(rounds: int, reps: int) -> list[dict]:
    """Per layer call: SGLang's RotaryEmbedding.forward_native vs moe_sglang.cpu_rope.rope_forward (its tables made
    at the first call of a step, so a step's later layers reuse them: timed as such)."""
    from moe_sglang import cpu_rope

    torch.set_num_threads(1)
    rope = cpu_rope.sglang_rope(DIM, DIM, 4096, 1e6)
    native = type(rope).forward_native
    g = torch.Generator().manual_seed(1)
    rows = []
    for tokens in (1, 8, 32):
        qkv = torch.randn(tokens, 3 * HEADS * DIM, generator=g)
        q, k, _ = qkv.split(HEADS * DIM, dim=-1)
        positions = torch.randint(0, 4096, (tokens,), generator=g)
        args = (rope, positions, q, k)
        paths = {
            "sglang": lambda args=args: native(*args),
            "tables": lambda args=args: cpu_rope.rope_forward(native, *args),
        }
        best = dict.fromkeys(paths, float("inf"))
        for r in range(rounds):
            for name in list(paths)[:: 1 if r % 2 else -1]:
                paths[name]()
                start = time.perf_counter()
                for _ in range(reps):
                    paths[name]()
                best[name] = min(best[name], (time.perf_counter() - start) / reps * 1e3)
        rows.append({"op": "rope", "tokens": tokens, **{f"{n}_ms": t for n, t in best.items()},
                     "ratio": best["tables"] / best["sglang"]})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = measure(args.rounds, args.reps)
    print(table(rows, list(rows[0])))
    rope = measure_rope(args.rounds, args.reps)
    print(table(rope, list(rope[0])))
    folder = out_dir(args.out, "attention_ops")
    payload = {"cpu": cpu_info(), "rounds": args.rounds, "rows": rows, "rope": rope}
    print(f"wrote {write_json(folder, 'attention_ops', payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
