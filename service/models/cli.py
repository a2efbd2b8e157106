"""`moe-serve model {corpus,train,draft,accept-head,inflate,stats,eval,card}`: build, train and inspect the embedded MoE (issue 3).

Cheap to import: heavy modules are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_WORK = Path("build/model")
ASSETS = Path(__file__).parent / "assets"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model_command", required=True)

    corpus = sub.add_parser("corpus", help="build the offline corpus, train the tokenizer, encode tokens")
    corpus.add_argument("--work", type=Path, default=DEFAULT_WORK, help="working directory (corpus/, tokens/)")
    corpus.add_argument("--seed", type=int, default=0)
    corpus.add_argument("--man-pages", type=int, default=1500)
    corpus.add_argument("--vocab-size", type=int, default=8192)
    corpus.add_argument(
        "--tokenizer",
        type=Path,
        help="encode with this tokenizer (a tokenizer.json or a model directory) instead of training one: the token "
        "arrays of a bundled model, e.g. to distil its draft",
    )

    train = sub.add_parser("train", help="train the MoE target or the dense draft")
    train.add_argument("--work", type=Path, default=DEFAULT_WORK)
    train.add_argument("--arch", choices=("moe", "dense"), default="moe")
    train.add_argument("--run", type=Path, help="run directory (checkpoint, log); default WORK/runs/ARCH")
    train.add_argument("--export", type=Path, help="write the HF checkpoint here (bf16) when done")
    train.add_argument("--steps", type=int, default=1000)
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--seq-len", type=int, default=256)
    train.add_argument("--lr", type=float, default=2e-3)
    train.add_argument("--warmup", type=int, default=50)
    train.add_argument("--balance-coef", type=float, default=0.01)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--threads", type=int, default=1)
    train.add_argument("--max-minutes", type=float, default=0.0, help="stop early with a checkpoint (0 = no limit)")
    train.add_argument("--tiny", action="store_true", help="a 2-layer width-64 model, for pipeline checks")
    train.add_argument("--init", type=Path, help="start from this HF checkpoint (its shape; shape flags not allowed)")
    train.add_argument(
        "--distill-from",
        type=Path,
        help="a teacher HF checkpoint (the target): train on KL(teacher || model) instead of the corpus's next token",
    )
    shape = train.add_argument_group("model shape (defaults: MoESpec / DenseSpec, i.e. moe-tiny and moe-tiny-draft)")
    shape.add_argument("--hidden-size", type=int)
    shape.add_argument("--layers", type=int)
    shape.add_argument("--intermediate-size", type=int, help="per-expert FFN width (MoE) or MLP width (dense)")
    shape.add_argument("--heads", type=int)
    shape.add_argument("--experts", type=int, help="experts per layer (MoE only)")
    shape.add_argument("--top-k", type=int, help="experts per token (MoE only)")

    draft = sub.add_parser("draft", help="write the INT4 self-draft of a target checkpoint")
    draft.add_argument("--target", type=Path, default=ASSETS / "moe-tiny")
    draft.add_argument("--out", type=Path, default=DEFAULT_WORK / "moe-tiny-int4")
    draft.add_argument(
        "--group-size",
        type=int,
        default=None,
        help="INT4 group (default: 128, or the largest of 64/32 the widths allow)",
    )

    head = sub.add_parser("accept-head", help="fit a dense draft's acceptance head (accept_head.py) beside it")
    head.add_argument("--target", type=Path, default=ASSETS / "moe-fine", help="the target's HF checkpoint")
    head.add_argument(
        "--draft", type=Path, default=ASSETS / "moe-fine-draft", help="the draft's; the head is written here"
    )
    head.add_argument("--prompts", type=int, default=200, help="training prompts per corpus domain")
    head.add_argument("--tokens", type=int, default=48, help="the target's greedy tokens per prompt")
    head.add_argument("--held-out", type=int, default=60, help="held-out prompts per domain the report reads it on")
    head.add_argument("--seed", type=int, default=7)
    head.add_argument("--threads", type=int, default=2)

    inflate = sub.add_parser("inflate", help="widen experts with zero units (function-preserving)")
    inflate.add_argument("--src", type=Path, default=ASSETS / "moe-tiny")
    inflate.add_argument("--out", type=Path, required=True)
    size = inflate.add_mutually_exclusive_group(required=True)
    size.add_argument("--intermediate-size", type=int)
    size.add_argument(
        "--target-weight-share",
        type=float,
        help="size experts so weight products take this share of a batch-1 decode step (needs --profile)",
    )
    inflate.add_argument("--profile", type=Path, help="bench.step_profile JSON with a batch-1 decode row of --src")
    inflate.add_argument("--verify", action="store_true", help="compare logits and greedy output with the source")

    stats = sub.add_parser("stats", help="routing statistics (load, entropy, reuse, INT4 top-k agreement)")
    stats.add_argument("--model", type=Path, default=ASSETS / "moe-tiny")
    stats.add_argument("--draft", type=Path, help="INT4 self-draft to compare routing with")
    stats.add_argument("--work", type=Path, default=DEFAULT_WORK)
    stats.add_argument("--tokens", type=int, default=4096, help="held-out tokens per domain")
    stats.add_argument("--out", type=Path, default=DEFAULT_WORK / "routing_stats.json")

    evaluate = sub.add_parser("eval", help="held-out loss vs unigram, samples, prompt-lookup acceptance")
    evaluate.add_argument("--model", type=Path, default=ASSETS / "moe-tiny")
    evaluate.add_argument("--work", type=Path, default=DEFAULT_WORK)
    evaluate.add_argument("--windows", type=int, default=32, help="held-out windows per domain for the loss")
    evaluate.add_argument("--prompts", type=int, default=10, help="prompts per domain for acceptance")
    evaluate.add_argument("--new-tokens", type=int, default=64)
    evaluate.add_argument("--threads", type=int, default=1)
    evaluate.add_argument("--out", type=Path, default=DEFAULT_WORK / "eval.json")

    card = sub.add_parser("card", help="render the model card README.md from the measured reports")
    card.add_argument("--model", type=Path, default=ASSETS / "moe-tiny")
    card.add_argument("--work", type=Path, default=DEFAULT_WORK)
    card.add_argument("--run", type=Path, default=DEFAULT_WORK / "runs" / "moe", help="training run directory")
    card.add_argument("--eval", type=Path, default=DEFAULT_WORK / "eval.json")
    card.add_argument("--stats", type=Path, help="routing_stats.json to include")
    card.add_argument("--draft-eval", type=Path, help="eval.json of the dense draft to include")
    card.add_argument("--inflation", type=Path, help="inflation.json written by `inflate --verify`")
    card.add_argument("--draft", type=Path, help="also write the dense draft's README.md (needs --draft-eval)")
    card.add_argument("--draft-run", type=Path, default=DEFAULT_WORK / "runs" / "dense")
    card.add_argument("--acceptance", type=Path, help="bench.draft_acceptance JSON to include (SGLang, per drafter)")
    card.add_argument("--baseline-eval", type=Path, help="another model's eval.json, its held-out loss shown beside")


def run(args: argparse.Namespace) -> int:
    handler = {
        "corpus": _corpus,
        "train": _train,
        "draft": _draft,
        "accept-head": _accept_head,
        "inflate": _inflate,
        "stats": _stats,
        "eval": _eval,
        "card": _card,
    }[args.model_command]
    return handler(args)


def _corpus(args) -> int:
    from service.models.corpus import DOMAINS, CorpusConfig, read_split, write_corpus
    from service.models.tokenizer import encode_corpus, load_tokenizer, train_tokenizer

    corpus_dir = args.work / "corpus"
    manifest = write_corpus(CorpusConfig(seed=args.seed, man_pages=args.man_pages), corpus_dir)
    if args.tokenizer is not None:
        tokenizer = load_tokenizer(args.tokenizer)
    else:
        tokenizer = train_tokenizer({d: read_split(corpus_dir, d, "train") for d in DOMAINS}, args.vocab_size)
    tokenizer.save(str(args.work / "tokenizer.json"))
    manifest["tokens"] = encode_corpus(tokenizer, corpus_dir, args.work / "tokens")
    (args.work / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(json.dumps(manifest["tokens"], indent=2))
    return 0


def _train(args) -> int:
    from service.models.batches import TokenData
    from service.models.draft import DenseSpec
    from service.models.tokenizer import EOS, load_tokenizer
    from service.models.train import MoESpec, TrainConfig, export_hf, train

    shaped = args.tiny or any(
        getattr(args, f) is not None for f in ("hidden_size", "layers", "intermediate_size", "heads")
    )
    if args.init is not None and shaped:
        raise SystemExit("--init takes its shape from the checkpoint: drop --tiny and the shape flags")
    tokenizer = load_tokenizer(args.work / "tokenizer.json")
    vocab, eos = tokenizer.get_vocab_size(), tokenizer.token_to_id(EOS)
    if args.arch == "moe":
        spec = (
            MoESpec(hidden_size=64, num_layers=2, intermediate_size=128, num_heads=2, head_dim=32)
            if args.tiny
            else MoESpec()
        )
    else:
        spec = (
            DenseSpec(hidden_size=64, num_layers=2, intermediate_size=128, num_heads=2, head_dim=32)
            if args.tiny
            else DenseSpec()
        )
    spec = _with_shape(spec, args)
    teacher = _teacher(args.distill_from, vocab) if args.distill_from is not None else None
    config = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        warmup=args.warmup,
        balance_coef=args.balance_coef,
        seed=args.seed,
        threads=args.threads,
        max_minutes=args.max_minutes,
    )
    run_dir = args.run or args.work / "runs" / args.arch
    data = TokenData.load(args.work / "tokens", "train")
    result = train(spec.to_config(vocab, eos), data, config, run_dir, init=args.init, teacher=teacher)
    if args.export:
        export_hf(result["model"], tokenizer, args.export)
        summary = {k: v for k, v in result.items() if k != "model"}
        (args.export / "training_summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k not in ("model", "train_config")}))
    return 0


def _teacher(path: Path, vocab: int):
    """The distillation teacher, float32, in eval mode; its vocabulary must be the corpus tokenizer's."""
    import torch
    from transformers import AutoModelForCausalLM

    teacher = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    if teacher.config.vocab_size != vocab:
        raise SystemExit(f"--distill-from {path}: vocab {teacher.config.vocab_size}, the corpus tokenizer's {vocab}")
    return teacher


def _with_shape(spec, args):
    """`spec` with the --hidden-size/--layers/... overrides given on the command line."""
    from dataclasses import replace

    fields = {
        "hidden_size": args.hidden_size,
        "num_layers": args.layers,
        "intermediate_size": args.intermediate_size,
        "num_heads": args.heads,
    }
    if args.arch == "moe":
        fields |= {"num_experts": args.experts, "top_k": args.top_k}
    elif args.experts is not None or args.top_k is not None:
        raise SystemExit("--experts/--top-k apply to --arch moe only")
    return replace(spec, **{k: v for k, v in fields.items() if v is not None})


def _draft(args) -> int:
    from service.models.draft import make_int4_self_draft

    print(json.dumps(make_int4_self_draft(args.target, args.out, args.group_size)))
    return 0


def _accept_head(args) -> int:
    import torch

    from service.models.accept_head import build

    torch.set_num_threads(args.threads)
    report = build(args.target, args.draft, args.prompts, args.tokens, args.seed, args.held_out)
    print(json.dumps(report, indent=2))
    return 0


def _inflate(args) -> int:
    from service.models.evaluate import SAMPLE_PROMPTS
    from service.models.inflate import inflate_checkpoint

    intermediate = args.intermediate_size
    if intermediate is None:
        from service.models.inflate import intermediate_for_weight_share

        if args.profile is None:
            raise SystemExit("--target-weight-share needs --profile (a bench.step_profile JSON of --src)")
        source = json.loads((args.src / "config.json").read_text())["intermediate_size"]
        profile = json.loads(args.profile.read_text())
        intermediate = intermediate_for_weight_share(profile, args.src.name, source, args.target_weight_share)
    report = inflate_checkpoint(args.src, args.out, intermediate)
    if args.verify:
        from service.models.inflate import verify_inflation
        from service.models.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(args.src)
        prompts = [tokenizer.encode(text).ids for texts in SAMPLE_PROMPTS.values() for text in texts]
        report["verify"] = verify_inflation(args.src, args.out, prompts)
        (args.out / "inflation.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
    verified = report.get("verify")
    return 0 if verified is None or verified["greedy_identical"] == verified["prompts"] else 1


def _stats(args) -> int:
    from service.models.routing_stats import run_routing_stats

    report = run_routing_stats(args.model, args.work / "tokens", args.tokens, args.draft)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["summary"], indent=2))
    return 0


def _eval(args) -> int:
    from service.models.evaluate import EvalConfig, run_evaluation

    config = EvalConfig(windows=args.windows, prompts=args.prompts, new_tokens=args.new_tokens, threads=args.threads)
    report = run_evaluation(args.model, args.work, config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["summary"], indent=2))
    return 0


def _card(args) -> int:
    from service.models.card import render_card
    from service.models.draft_card import render_draft_card

    def read(path):
        return json.loads(path.read_text()) if path else None

    from service.models.draft import int4_group_size

    text = render_card(
        args.model,
        args.work,
        args.run,
        read(args.eval),
        read(args.stats),
        read(args.draft_eval),
        read(args.inflation),
        acceptance=read(args.acceptance),
        int4_group_size=int4_group_size(args.model),
        baseline_eval=read(args.baseline_eval),
    )
    (args.model / "README.md").write_text(text)
    print(f"wrote {args.model / 'README.md'}")
    if args.draft:
        (args.draft / "README.md").write_text(render_draft_card(args.draft, args.draft_run, read(args.draft_eval)))
        print(f"wrote {args.draft / 'README.md'}")
    return 0
