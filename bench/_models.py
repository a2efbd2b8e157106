"""Model checkpoints for benches: the deciding setup (which model, how inflated, which drafters), the bundled models,
their function-preserving inflated variant, their drafts (dense STANDALONE draft, INT4 self-draft built on demand)
and their shape."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from moe_sglang.launch import (
    DEFAULT_DRAFT_MODEL,
    DEFAULT_MODEL,
    FINE_DRAFT_MODEL,
    FINE_MODEL,
    EngineConfig,
    SpeculationConfig,
)
from moe_sglang.settings import EngineSettings

BUILD = Path("build") / "bench-models"  # derived checkpoints (INT4 self-drafts, inflated copies), rebuilt when absent
DENSE_DRAFTS = {DEFAULT_MODEL.name: DEFAULT_DRAFT_MODEL, FINE_MODEL.name: FINE_DRAFT_MODEL}  # target name -> draft
DRAFTERS = ("ngram", "dense", "int4")  # NGRAM; STANDALONE with the dense draft; STANDALONE with the INT4 self-draft
REPO = Path(__file__).resolve().parent.parent
INFLATED_CACHE = (
    REPO / BUILD
)  # git-ignored; the deciding setup's inflated copies, rebuilt from the checkpoint on demand


@dataclass(frozen=True)
class DecidingSetup:
    """What the deciding benchmarks (verify_cost, budget, policies, replay, run_all) run on by default."""

    model: Path  # the MoE target checkpoint
    inflate: int  # expert-width factor of its memory-bound, function-preserving copy (1 = the checkpoint itself)
    draft_model: Path  # the dense STANDALONE draft (the target's tokenizer)
    drafters: tuple[str, ...] = ("ngram", "standalone")  # moe-serve algorithms (moe_sglang/algorithm.py ALGORITHMS)


MEMORY_BOUND_FACTOR = 48
QUICK_INFLATE = 2
# moe-fine's experts 48x wider (96 -> 4608; 875 MB): a batch-1 decode reads 4 experts x 4 layers of them, 113 MB, the
# weight bytes per token of moe-tiny's copy that bench.step_profile sized for a 70 % weight share (moe-tiny x17.75,
# `moe-serve model inflate --target-weight-share 0.7`: 2 experts of 3 x 256 x 9088 per layer).


def deciding_setup() -> DecidingSetup:
    """The ONE place naming the default of every deciding bench: the fine-grained sparse moe-fine (32 experts,
    top-4), memory-bound, with its dense draft."""
    return DecidingSetup(model=FINE_MODEL, inflate=MEMORY_BOUND_FACTOR, draft_model=FINE_DRAFT_MODEL)


def add_setup_arguments(parser: argparse.ArgumentParser, drafters: bool = False) -> None:
    """--model / --inflate (and --draft-model / --drafters): defaults from deciding_setup()."""
    setup = deciding_setup()
    parser.add_argument("--model", default=None, help=f"Mixtral checkpoint (default: {setup.model.name})")
    parser.add_argument(
        "--inflate",
        type=int,
        default=None,
        help=f"run on the model's function-preserving copy with N-times wider experts (default {setup.inflate})",
    )
    if drafters:
        parser.add_argument(
            "--draft-model", type=Path, default=None, help=f"STANDALONE draft (default: {setup.draft_model.name})"
        )
        parser.add_argument(
            "--drafters", default=",".join(setup.drafters), help="comma-separated subset of ngram,standalone"
        )


def setup_from_args(args: argparse.Namespace) -> DecidingSetup:
    """The deciding setup with the command line's overrides; the model path checked."""
    default = deciding_setup()
    drafters = tuple(d for d in getattr(args, "drafters", ",".join(default.drafters)).split(",") if d)
    unknown = set(drafters) - {"ngram", "standalone"}
    if unknown:
        raise SystemExit(f"unknown drafters {sorted(unknown)}: choose from ngram, standalone")
    model = resolve_model(args.model) if args.model else resolve_model(str(default.model))
    quick = getattr(args, "quick", False)  # smoke runs: a 2x copy (the memory-bound one is ~1 GB to write and load)
    setup = DecidingSetup(
        model=model,
        inflate=(QUICK_INFLATE if quick else default.inflate) if args.inflate is None else args.inflate,
        draft_model=getattr(args, "draft_model", None) or DENSE_DRAFTS.get(model.name, default.draft_model),
        drafters=drafters,
    )
    if setup.inflate < 1:
        raise SystemExit(f"--inflate must be >= 1, got {setup.inflate}")
    if "standalone" in drafters and not (setup.draft_model / "config.json").exists():
        raise SystemExit(f"no STANDALONE draft at {setup.draft_model}: pass --draft-model PATH")
    return setup


def bench_engine(
    model: Path,
    spec: SpeculationConfig,
    threads: int,
    settings: EngineSettings | None = None,
    extra: tuple[str, ...] = (),
) -> EngineConfig:
    """The engine the deciding benches start: a small KV pool (16 requests of the short context fit), so two or three
    engines fit beside other jobs."""
    return EngineConfig(
        model_path=str(model),
        port=0,
        max_running_requests=16,
        max_total_tokens=8192,
        speculation=spec,
        threads=threads,
        settings=settings or EngineSettings(),
        extra_args=extra,
    )


def timed_model(setup: DecidingSetup) -> Path:
    """The checkpoint the engine benches serve: the model, or its inflated copy (cached under .cache/inflated)."""
    if setup.inflate <= 1:
        return setup.model
    return inflated(setup.model, INFLATED_CACHE / f"{setup.model.name}-x{setup.inflate}", setup.inflate)


@dataclass(frozen=True)
class MoeCheckpoint:
    path: Path  # HF checkpoint folder
    num_experts: int  # routed experts per MoE layer
    top_k: int  # experts per token
    num_layers: int  # MoE layers
    hidden: int  # hidden size
    intermediate: int  # expert intermediate size
    context: int  # max positions

    @property
    def expert_params(self) -> int:  # parameters of one expert (w1, w3: [I, H]; w2: [H, I])
        return 3 * self.hidden * self.intermediate


def resolve_model(path: str | None) -> Path:
    model = Path(path) if path else deciding_setup().model
    if not (model / "config.json").exists():
        raise SystemExit(f"no checkpoint at {model}: pass --model PATH (the bundled model is built by issue 3)")
    return model


def read_checkpoint(path: Path) -> MoeCheckpoint:
    config = json.loads((path / "config.json").read_text())
    if config.get("model_type") != "mixtral":
        raise ValueError(f"{path}: a {config.get('model_type')!r} checkpoint; these benches need mixtral")
    return MoeCheckpoint(
        path=path,
        num_experts=config["num_local_experts"],
        top_k=config["num_experts_per_tok"],
        num_layers=config["num_hidden_layers"],
        hidden=config["hidden_size"],
        intermediate=config["intermediate_size"],
        context=config.get("max_position_embeddings", 2048),
    )


def inflated(src: Path, dst: Path, factor: int) -> Path:
    """`src` with every expert's intermediate size times `factor` (zero units: same function, more bytes);
    tokenizer and other files are copied along (service.models.safetensors_io.map_checkpoint). Built in a
    sibling folder and renamed, so a run killed half-way leaves no half-written copy behind."""
    from service.models.inflate import inflate_checkpoint

    if not (dst / "config.json").exists():
        import shutil
        import tempfile

        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}-", dir=dst.parent))
        try:
            inflate_checkpoint(src, tmp / "model", read_checkpoint(src).intermediate * factor)
            shutil.rmtree(dst, ignore_errors=True)
            (tmp / "model").rename(dst)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dst


def int4_self_draft(target: Path, cache: Path = BUILD) -> Path:
    """MoE-SpeQ's INT4 self-draft of `target` (service.models.draft), built once under `cache` and reused; rebuilt
    when the target checkpoint is newer than the cached draft."""
    from service.models.draft import make_int4_self_draft

    target = Path(target)
    out = cache / f"{target.resolve().name}-int4"
    weights = target / "model.safetensors"
    built = out / "model.safetensors"
    if not built.exists() or built.stat().st_mtime < weights.stat().st_mtime:
        make_int4_self_draft(target, out)
    return out


def dense_draft(target: Path) -> Path:
    """The bundled dense STANDALONE draft trained for `target` (matched by folder name, or `<target>-draft` beside it)."""
    target = Path(target)
    draft = DENSE_DRAFTS.get(target.resolve().name, target.parent / f"{target.name}-draft")
    if not (draft / "config.json").exists():
        raise SystemExit(f"no dense draft for {target} (looked at {draft})")
    return draft


def drafter_speculation(drafter: str, target: Path, num_steps: int = 3, num_draft_tokens: int = 4) -> SpeculationConfig:
    """The engine speculation for one (target, drafter) pair: `ngram`, `dense` (STANDALONE with the dense draft)
    or `int4` (STANDALONE with the INT4 self-draft)."""
    if drafter == "ngram":
        return SpeculationConfig(algorithm="ngram", num_draft_tokens=num_draft_tokens)
    if drafter == "dense":
        path = dense_draft(target)
    elif drafter == "int4":
        path = int4_self_draft(target)
    else:
        raise ValueError(f"unknown drafter {drafter!r}: expected one of {DRAFTERS}")
    return SpeculationConfig(
        algorithm="standalone", draft_model_path=str(path), num_steps=num_steps, num_draft_tokens=num_draft_tokens
    )
