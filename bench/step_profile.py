"""Where the time of one engine step goes: decode, extend (prefill) and speculative verify steps of the SGLang CPU
engine, at batch 1 and 8, on the bundled model and its memory-bound inflated copy.

Measured inside the engine's own scheduler process with SGLang's profiler (`/start_profile`, torch.profiler, CPU
activity, operator shapes, no Python stacks: stacks would multiply the Python cost it is meant to measure). SGLang
annotates the model step (`step[DECODE bs=N]`, inside `scheduler.run_batch`); an iteration runs from one model step
to the next. Each top-level operator of the model step is put in one bucket:

- `attention`: our `sgl_kernel::decode_attention_cpu` / `extend_attention_cpu` (service/kernels/attention_cpu.py),
  and the direct decode forward's `moe_serve::decode_attention` (the whole sublayer: its norm, QKV and output products
  too; service/kernels/decode_attention.py);
- `sgl_kernel_other`: the other `sgl_kernel::*` replacement ops (cache locations, KV writes, ...);
- `expert_gemm`: matrix products whose weight has an expert's shape ([2I, H] or [H, I]), a MoE layer's expert forward
  in one call (`moe_serve::stream_moe`) and the MoE op that adds its norm, router and routing to it
  (`moe_serve::decode_moe`, service/kernels/decode_moe.py);
- `dense_gemm`: the other weight products (QKV, output projection, router, LM head);
- `torch_other`: every other operator (norms, rotary, routing, sort/index of the MoE, sampling, ...);
- `forward_glue`: time in the model step outside any operator (SGLang's and the model's Python);
- `scheduler`: the rest of the scheduler iteration (batch preparation, result processing, streaming, receiving).

The verify stage (`--verify-k K`, default 3; 0 skips it) runs moe-serve's STANDALONE engine (the model's dense draft)
with every request at static K: SGLang labels each model forward of such an iteration `step[DRAFT ...]` (the draft
model's, whatever mode it borrows; moe-serve labels its direct draft forward, moe_sglang/draft_forward.py, alike) or `step[VERIFY ...]` (the target's), so an iteration runs from one
`scheduler.run_batch` to the next and adds two buckets: `draft_model` (everything inside the draft forwards) and
`spec_glue` (moe-serve's speculative step outside any model forward: planning, draft trees, acceptance, the KV
moves); the target verify's operators go to the buckets above, its Python to `forward_glue`.

The profiler adds a few microseconds per operator, so a profiled step is slower than a real one: next to the
profile, the same load runs unprofiled and its client-side TPOT is reported (`tpot_ms`), and the buckets are also
given as shares of the profiled step. `weight_bytes` is what a step's weight products read (dense weights + the
unique experts hit, counted from the operator shapes), and `bandwidth_floor_ms` is those bytes over the measured copy
bandwidth (this process's threads: the machine's), `thread_floor_ms` over the copy bandwidth of the engine's thread
count (what the engine's threads can read); the goal is a batch-1 decode of the inflated model within 1.5x of the
floor (`tpot_over_floor`: unprofiled TPOT over it). `weight_share` = (expert + dense
GEMM time) / profiled step time; `inflate_for_share` is the expert-size factor that would make it 0.7 on this model
(expert GEMM time assumed to scale with the factor, everything else fixed).

    python -m bench.step_profile [--model PATH] [--inflate 8 | --inflated PATH] [--batches 1,8] [--steps 24]
                                 [--variants batched,batched+linear] [--verify-k 3] [--draft-model PATH] [--quick]
                                 [--out DIR]

A variant is an engine's CPU attention (`fused` | `batched` | `loop`, EngineSettings.cpu_attention) and, each after
a `+`, its expert products (`tuned` | `torch` | `linear`, EngineSettings.cpu_gemm; default tuned) and its draft
model's forward (`direct` | `sglang`, EngineSettings.draft_forward; default direct): `fused,fused+torch` compares the
tuned expert products with and without the stream kernel (moe_sglang/cpu_moe.py), `fused,fused+linear` with
SGLang's `F.linear`, `fused,fused+sglang` the draft's direct forward (moe_sglang/draft_forward.py) with SGLang's
runner.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import torch

from bench._common import (
    add_engine_threads_argument,
    add_inflated_model_arguments,
    cpu_info,
    out_dir,
    table,
    write_json,
)
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import DENSE_DRAFTS, MoeCheckpoint, inflated, read_checkpoint, resolve_model
from bench._profile_trace import BUCKETS, analyse_trace
from bench.policies import as_token_ids
from bench.verify_cost import memory_bandwidth
from moe_sglang.launch import EngineConfig, SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import CPU_ATTENTION, CPU_GEMM, DRAFT_FORWARD, EXPERT_WEIGHTS, TARGET_FORWARD, EngineSettings
from service.models.inflate import factor_for_weight_share

WEIGHT_SHARE_GOAL = 0.7


def variant_settings(variant: str) -> EngineSettings:
    """A variant: an EngineSettings.cpu_attention value, with `+GEMM` for expert products other than the tuned ones
    (EngineSettings.cpu_gemm), `+DRAFT` for a draft forward other than the direct one (EngineSettings.draft_forward)
    and `+target-TARGET` for a target decode forward other than the direct one (EngineSettings.target_forward), e.g.
    `fused+torch`, `batched+linear`, `fused+sglang` or `fused+target-sglang`; `+experts-WEIGHTS` for expert weights
    kept otherwise (EngineSettings.expert_weights, e.g. `fused+experts-float32`)."""
    attention, *rest = variant.split("+")
    gemms = [x for x in rest if x in CPU_GEMM]
    drafts = [x for x in rest if x in DRAFT_FORWARD]
    targets = [x.removeprefix("target-") for x in rest if x.startswith("target-")]
    targets = [x for x in targets if x in TARGET_FORWARD]
    weights = [x.removeprefix("experts-") for x in rest if x.startswith("experts-")]
    weights = [x for x in weights if x in EXPERT_WEIGHTS]
    if (
        attention not in CPU_ATTENTION
        or max(len(gemms), len(drafts), len(targets), len(weights)) > 1
        or len(gemms) + len(drafts) + len(targets) + len(weights) != len(rest)
    ):
        raise SystemExit(
            f"variant {variant!r}: ATTENTION[+GEMM][+DRAFT][+target-TARGET][+experts-WEIGHTS], ATTENTION of "
            f"{CPU_ATTENTION}, GEMM of {CPU_GEMM}, DRAFT of {DRAFT_FORWARD}, TARGET of {TARGET_FORWARD}, WEIGHTS of "
            f"{EXPERT_WEIGHTS}"
        )
    defaults = EngineSettings()
    return EngineSettings(
        cpu_attention=attention,
        cpu_gemm=gemms[0] if gemms else defaults.cpu_gemm,
        draft_forward=drafts[0] if drafts else defaults.draft_forward,
        target_forward=targets[0] if targets else defaults.target_forward,
        expert_weights=weights[0] if weights else defaults.expert_weights,
    )


def engine_config(
    model: Path, threads: int, variant: str = "fused", speculation: SpeculationConfig | None = None
) -> EngineConfig:
    return EngineConfig(
        model_path=str(model),
        port=0,
        threads=threads,
        max_running_requests=16,
        max_total_tokens=8192,
        speculation=speculation or SpeculationConfig(),
        settings=variant_settings(variant),
    )


def static_k(k: int) -> dict:
    """The request hint that pins a request's K (moe_sglang/hints.py)."""
    return {"custom_params": {"moe_serve": {"policy": "static", "max_k": k}}}


def inflate_for_share(row: dict, goal: float = WEIGHT_SHARE_GOAL) -> float | None:
    """Expert-size factor that would make weight products `goal` of this step (service/models/inflate.py)."""
    if row["expert_gemm_ms"] <= 0:
        return None
    return factor_for_weight_share(row["expert_gemm_ms"], row["dense_gemm_ms"], row["step_ms"], goal)


# --- measuring -------------------------------------------------------------------------------------------------------


STAGES = (("decode", "DECODE"), ("prefill", "EXTEND"))  # profiler stage, the trace file's stage label


def profile_load(
    url: str, prompts: list, batch: int, steps: int, folder: Path, tag: str, stages=STAGES, extra=None
) -> dict[str, Path]:
    """Profile `steps` decode steps, then (a second load) the prefill steps, of `batch` concurrent requests; returns
    the trace per stage label. One profiler session per stage: a decode session started in the very step that
    stopped a prefill session crashed the scheduler inside torch.profiler here (a segmentation fault in kineto's
    stop). `extra`: the requests' body extras (hints)."""
    model = served_model(url)
    traces: dict[str, Path] = {}
    for stage, trace_stage in stages:
        count, tokens = (steps, steps + 8) if stage == "decode" else (2, 4)
        request = {
            "output_dir": str(folder),
            "num_steps": count,
            "activities": ["CPU"],
            "with_stack": False,
            "record_shapes": True,
            "profile_by_stage": True,
            "profile_stages": [stage],
            "profile_id": f"{tag}-{stage}",
        }
        httpx.post(f"{url}/flush_cache", timeout=60)
        httpx.post(f"{url}/start_profile", json=request, timeout=60).raise_for_status()
        run_batch(url, model, prompts[:batch], tokens, batch, extra)
        # a session stops at the first step of another stage or past its count: one more request closes it
        run_batch(url, model, prompts[batch : batch + 1], 4, 1, extra)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = list(folder.glob(f"{tag}-{stage}-*-{trace_stage}.trace.json.gz"))
            if found:
                traces[trace_stage] = found[0]
                break
            time.sleep(1)
    return traces


class Engine:
    """A running engine that can be restarted: torch's profiler sometimes crashes the scheduler when it stops
    (a segmentation fault inside torch.profiler's stop on this machine), so a failed profile restarts it and retries."""

    def __init__(self, config: EngineConfig, log_path: Path) -> None:
        self.config, self.log_path, self.stack, self.restarts = config, log_path, contextlib.ExitStack(), 0
        self.url = self.stack.enter_context(running_engine(config, log_path=log_path))

    def restart(self) -> None:
        self.stack.close()
        self.restarts += 1
        log = self.log_path.with_suffix(f".crash{self.restarts}.log")
        self.log_path.rename(log)
        self.stack = contextlib.ExitStack()
        self.url = self.stack.enter_context(running_engine(self.config, log_path=self.log_path))

    def close(self) -> None:
        self.stack.close()


PROFILE_TRIES = 3


def measure(
    ckpt: MoeCheckpoint,
    prompts: list,
    batches,
    steps: int,
    repeats: int,
    threads: int,
    variants,
    folder: Path,
    tmp: Path,
    verify: tuple[int, Path] | None = None,
) -> list[dict]:
    """Each variant (`variant_settings`) on its own engine, all up at once; per batch, one profile per
    variant, then the unprofiled TPOT runs taking turns (rotated order) so load changes hit all variants alike.
    `verify` = (K, draft model): the verify stage too, on a STANDALONE engine whose requests all run at static K
    (module docstring), its unprofiled TPOT measured in the same turns: one of the first variant, and one of each
    other variant that differs from it in its draft model's forward (the only setting a verify step has beyond a
    decode's to compare)."""
    rows = []
    first = variant_settings(variants[0])
    verify_variants = [variants[0]] + [
        v for v in variants[1:] if variant_settings(v).draft_forward != first.draft_forward
    ]
    with contextlib.ExitStack() as stack:
        engines = {}
        for v in variants:
            log = folder / f"engine-{ckpt.path.name}-{v}.log"
            engines[v] = Engine(engine_config(ckpt.path, threads, v), log)
            stack.callback(engines[v].close)
        hints: dict[str, dict | None] = dict.fromkeys(engines)
        if verify is not None:
            k, draft = verify
            spec = SpeculationConfig("standalone", draft_model_path=str(draft), num_steps=k, num_draft_tokens=k + 1)
            for v in verify_variants:
                name = f"{v}-verify-k{k}"
                log = folder / f"engine-{ckpt.path.name}-{name}.log"
                engines[name] = Engine(engine_config(ckpt.path, threads, v, spec), log)
                stack.callback(engines[name].close)
                hints[name] = static_k(k)
        for v, engine in engines.items():
            run_batch(engine.url, served_model(engine.url), prompts[:2], 8, 2, hints[v])  # warm-up
        for batch in batches:
            traces = {}
            for v, engine in engines.items():
                stages = STAGES if hints[v] is None else STAGES[:1]  # a speculative engine: its decode steps
                for attempt in range(PROFILE_TRIES):
                    tag = f"{ckpt.path.name}-{v}-b{batch}-{attempt}"
                    try:
                        traces[v] = profile_load(engine.url, prompts, batch, steps, tmp, tag, stages, hints[v])
                    except (httpx.HTTPError, RuntimeError) as err:
                        print(f"profile of {tag} failed ({err!r}); restarting its engine")
                        engine.restart()
                        continue
                    if len(traces[v]) == len(stages):
                        break
                    engine.restart()
            tpots: dict[str, list[float]] = {v: [] for v in engines}
            names = list(engines)
            for r in range(repeats):
                for v in names[r % len(names) :] + names[: r % len(names)]:
                    url = engines[v].url
                    run = run_batch(url, served_model(url), prompts[:batch], steps + 8, batch, hints[v])
                    tpots[v].append(run["tpot_ms"])
            for v in engines:
                for stage, path in sorted(traces[v].items()):
                    label = stage.lower() if hints[v] is None else "verify"
                    row = {"model": ckpt.path.name, "variant": v, "stage": label, "batch": batch}
                    row |= analyse_trace(path, ckpt)
                    if stage == "DECODE":
                        row["tpot_ms"] = statistics.median(tpots[v])
                        row["tpot_spread_ms"] = [min(tpots[v]), max(tpots[v])]
                    rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_inflated_model_arguments(parser)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--steps", type=int, default=24, help="profiled steps per stage")
    parser.add_argument("--repeats", type=int, default=3, help="unprofiled TPOT runs per batch")
    parser.add_argument(
        "--variants",
        default=EngineSettings().cpu_attention,
        help="comma-separated engine variants (default: the engine's attention), one engine each: "
        f"ATTENTION[+GEMM][+DRAFT] (cpu_attention of {CPU_ATTENTION}, cpu_gemm of {CPU_GEMM}, default tuned; "
        f"draft_forward of {DRAFT_FORWARD}, default direct), e.g. batched,batched+linear or fused,fused+sglang",
    )
    parser.add_argument("--verify-k", type=int, default=3, help="drafts per request of the verify stage (0: none)")
    parser.add_argument("--draft-model", type=Path, default=None, help="its STANDALONE draft (default: the model's)")
    parser.add_argument("--keep-traces", default=None, help="folder to keep the profiler traces in (default: dropped)")
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 1, few steps, no inflated copy")
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "step_profile")
    source = resolve_model(args.model)
    batches = (1,) if args.quick else tuple(int(b) for b in args.batches.split(","))
    steps, repeats = (8, 1) if args.quick else (args.steps, args.repeats)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or len(variants) > 2:
        raise SystemExit("--variants: one or two (at most two engines at once)")
    for v in variants:
        variant_settings(v)
    prompts = as_token_ids(prompt_sets(16, 400), source, 96)["mixed"]
    draft = args.draft_model or DENSE_DRAFTS.get(source.name)
    if args.verify_k < 0 or (args.verify_k and not (draft and (Path(draft) / "config.json").exists())):
        raise SystemExit(f"--verify-k {args.verify_k} needs K >= 0 and a STANDALONE draft (--draft-model), got {draft}")
    verify = (args.verify_k, Path(draft)) if args.verify_k else None
    bandwidth = memory_bandwidth(64 if args.quick else 512)
    # what the engine's own threads can read: the floor of a step that runs on them
    thread_bandwidth = memory_bandwidth(64 if args.quick else 512, threads=args.engine_threads)
    rows = []
    with tempfile.TemporaryDirectory(prefix="step-profile-") as tmp_name:
        tmp = Path(args.keep_traces or tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        models = [read_checkpoint(source)]
        if args.inflated:
            models.append(read_checkpoint(Path(args.inflated)))
        elif args.inflate > 1 and not args.quick:
            models.append(read_checkpoint(inflated(source, tmp / f"{source.name}-x{args.inflate}", args.inflate)))
        for ckpt in models:
            rows += measure(ckpt, prompts, batches, steps, repeats, args.engine_threads, variants, folder, tmp, verify)
    for row in rows:
        row["bandwidth_floor_ms"] = row["weight_bytes"] / bandwidth * 1e3
        row["thread_floor_ms"] = row["weight_bytes"] / thread_bandwidth * 1e3
        # the goal's ratio: the unprofiled decode step (client TPOT) over the floor; a verify's TPOT is per token
        # emitted, not per step
        tpot = row.get("tpot_ms") if row["stage"] == "decode" else None
        row["tpot_over_floor"] = tpot / row["bandwidth_floor_ms"] if tpot else None
        row["tpot_over_thread_floor"] = tpot / row["thread_floor_ms"] if tpot else None
        row["inflate_for_share"] = inflate_for_share(row) if row["stage"] == "decode" else None
    columns = ["model", "variant", "stage", "batch", "step_ms", "tpot_ms", *[f"{b}_ms" for b in BUCKETS]]
    columns += ["weight_share", "bandwidth_floor_ms", "thread_floor_ms", "tpot_over_floor", "inflate_for_share"]
    print(
        f"memory bandwidth (torch copy): {bandwidth / 1e9:.2f} GB/s with {torch.get_num_threads()} threads, "
        f"{thread_bandwidth / 1e9:.2f} GB/s with the engine's {args.engine_threads}"
    )
    print(table(rows, columns))
    payload = {
        "cpu": cpu_info(),
        "engine_threads": args.engine_threads,
        "bandwidth_bytes_per_s": bandwidth,
        "bandwidth_threads": torch.get_num_threads(),
        "thread_bandwidth_bytes_per_s": thread_bandwidth,
        "steps": steps,
        "variants": variants,
        "verify_k": args.verify_k,
        "draft_model": str(draft) if verify else None,
        "buckets": list(BUCKETS),
        "rows": rows,
    }
    print(f"wrote {write_json(folder, 'step_profile', payload)}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
