"""Render the dense draft's card (README.md beside its checkpoint) from its training summary, training log and
reports: architecture, training (and distillation), acceptance head, held-out loss."""

from __future__ import annotations

import json
from pathlib import Path

from service.models.accept_head import card_lines
from service.models.card import caveats, param_count, train_log


def render_draft_card(draft_dir: Path, run_dir: Path, draft_eval: dict | None) -> str:
    """Short card for the dense draft: architecture, training (and distillation), acceptance head, held-out loss."""
    config = json.loads((draft_dir / "config.json").read_text())
    summary = json.loads((draft_dir / "training_summary.json").read_text())
    log = train_log(run_dir)
    target = draft_dir.resolve().name.removesuffix("-draft")
    teacher = summary.get("distilled_from")
    if teacher and not summary.get("init_summary"):
        raise ValueError(f"{draft_dir}: distilled, but training_summary.json lacks the first run's (init_summary)")
    first = summary.get("init_summary") or summary  # a run from --init: the checkpoint's own run first
    lines = [
        f"# {draft_dir.resolve().name}: dense draft for standalone speculation against {target}",
        "",
        f"`LlamaForCausalLM`: hidden {config['hidden_size']}, {config['num_hidden_layers']} layers, MLP {config['intermediate_size']}, "
        f"{config['num_attention_heads']} heads x {config['head_dim']}, tied embeddings, {param_count(draft_dir) / 1e6:.1f} M parameters, "
        f"bf16 on disk. Same tokenizer and corpus as `../{target}/` (see its card).",
        "",
        f"Trained by `moe-serve model train --arch dense{_dense_flags(config)}`: {_run_sentence(first)}"
        + (f", final train CE {log[-1]['ce']:.2f}." if log and first is summary else "."),
    ]
    if first is not summary:
        how = (
            f"Then distilled from `../{target}/` (`--init` the checkpoint above, `--distill-from` the target: the loss is "
            f"KL(target || draft) of the next-token distributions at every position of the corpus's windows, so the "
            f"draft learns the target's next token rather than the corpus's)"
            if teacher
            else "Then trained further on the corpus (`--init` the checkpoint above)"
        )
        metric = "kl" if teacher else "ce"
        final = (
            f", final train {metric.upper()} {log[-1][metric]:.3f} nats/token." if log and metric in log[-1] else "."
        )
        lines += ["", f"{how}: {_run_sentence(summary)}{final}"]
    if summary["steps"] < summary["planned_steps"]:
        lines += ["", caveats(summary)[-1]]
    corpus = "moe-serve model corpus" + (f" --tokenizer {teacher}" if teacher else "")
    lines += ["", "Reproduce:", "```", corpus, _train_command(config, first, "DIR" if first is summary else "FIRST")]
    if first is not summary:
        extra = " --init FIRST" + (f" --distill-from {teacher}" if teacher else "")
        lines.append(_train_command(None, summary, "DIR", extra))
    lines += ["```", *card_lines(draft_dir, target)]  # and its acceptance head's paragraph
    if draft_eval:
        lines += ["", "| domain | held-out loss (nats/token) | unigram |", "|---|---|---|"]
        lines += [
            f"| {d} | {r['heldout_loss']:.3f} | {r['unigram_loss']:.3f} |" for d, r in draft_eval["domains"].items()
        ]
    return "\n".join(lines) + "\n"


def _run_sentence(summary: dict) -> str:
    tc = summary["train_config"]
    return (
        f"{summary['steps']} steps (planned {summary['planned_steps']}) x {tc['batch_size']} x {tc['seq_len']} = "
        f"{summary['tokens']:,} tokens in {summary['wall_s'] / 60:.1f} min, peak lr {tc['lr']}, seed {tc['seed']}, "
        f"{tc['threads']} thread(s)"
    )


def _train_command(config: dict | None, summary: dict, export: str, extra: str = "") -> str:
    """The `model train` line of a run; no shape flags where `config` is None (--init takes the checkpoint's)."""
    tc, shape = summary["train_config"], _dense_flags(config) if config is not None else ""
    return (
        f"moe-serve model train --arch dense{shape}{extra} --steps {tc['steps']} --batch-size "
        f"{tc['batch_size']} --warmup {tc['warmup']} --lr {tc['lr']} --seed {tc['seed']} --threads {tc['threads']} "
        f"--max-minutes {tc['max_minutes']:g} --export {export}"
    )


def _dense_flags(config: dict) -> str:
    from service.models.draft import DenseSpec

    default = DenseSpec()
    pairs = [
        ("--hidden-size", config["hidden_size"], default.hidden_size),
        ("--layers", config["num_hidden_layers"], default.num_layers),
        ("--heads", config["num_attention_heads"], default.num_heads),
        ("--intermediate-size", config["intermediate_size"], default.intermediate_size),
    ]
    return "".join(f" {flag} {value}" for flag, value, base in pairs if value != base)
