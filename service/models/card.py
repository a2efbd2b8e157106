"""Render the shipped model card (README.md) from the measured reports, so every number in it comes from a file."""

from __future__ import annotations

import json
from pathlib import Path

# Below this spread in prompt-lookup accept rate between the best and worst domain, the card calls separation weak.
WEAK_SEPARATION = 0.05


def _params(model_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 - safe_open is not a dict


def _numel(shape: list[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def _train_log(run_dir: Path) -> list[dict]:
    path = run_dir / "train_log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def separation_sentence(accept: dict[str, float]) -> str:
    ranked = sorted(accept, key=accept.get, reverse=True)
    spread = accept[ranked[0]] - accept[ranked[-1]]
    order = " > ".join(f"{d} {accept[d]:.2f}" for d in ranked)
    verdict = "weak" if spread < WEAK_SEPARATION else "clear"
    return (
        f"Accept-rate order: {order}; spread {spread:.2f} — separation is **{verdict}** (threshold {WEAK_SEPARATION})."
    )


def render_card(
    model_dir: Path,
    work: Path,
    run_dir: Path,
    eval_report: dict,
    stats: dict | None,
    draft_eval: dict | None,
    inflation: dict | None = None,
) -> str:
    config = json.loads((model_dir / "config.json").read_text())
    summary = json.loads((model_dir / "training_summary.json").read_text())
    manifest = json.loads((work / "manifest.json").read_text())
    log = _train_log(run_dir)
    tc = summary["train_config"]
    lines = [
        "# moe-tiny: the embedded default MoE of moe-serve",
        "",
        "A small Mixtral-architecture MoE trained from scratch by `moe-serve model train` on offline text (issue 3), so the",
        "service has a real MoE to serve and speculation has task-dependent acceptance. It is a *tiny* model: expect fluent-looking",
        "but often wrong text; its value is realistic routing and acceptance structure, not answers.",
        "",
        "## Architecture",
        f"`MixtralForCausalLM`: hidden {config['hidden_size']}, {config['num_hidden_layers']} layers, "
        f"{config['num_local_experts']} experts top-{config['num_experts_per_tok']}, expert intermediate {config['intermediate_size']}, "
        f"{config['num_attention_heads']} heads x {config['head_dim']} (KV heads = heads), context {config['max_position_embeddings']}, "
        f"vocab {config['vocab_size']} (byte-level BPE, digits split), tied embeddings, {_params(model_dir) / 1e6:.1f} M parameters, bf16 on disk.",
        "",
        "## Data",
        "| domain | source | train docs | train tokens | held-out docs | held-out tokens |",
        "|---|---|---|---|---|---|",
    ]
    sources = {
        "python": "CPython 3.11 standard library `*.py`, tests excluded",
        "prose": "licences, /usr/share/doc copyright + README files, pydoc topics, man pages rendered as text",
        "arithmetic": "generated sums, multi-step expressions, word problems with worked steps (seed 0)",
    }
    for domain, splits in manifest["domains"].items():
        lines.append(
            f"| {domain} | {sources[domain]} | {splits['train']['documents']} | {manifest['tokens'][domain + '.train']:,} "
            f"| {splits['heldout']['documents']} | {manifest['tokens'][domain + '.heldout']:,} |"
        )
    lines += [
        "",
        f"Held-out split: {manifest['config']['heldout_fraction']:.0%} of *documents* per domain by seeded hash. Batches mix the "
        "three domains with equal probability.",
        "",
        "## Training",
        f"- {summary['steps']} steps (planned {summary['planned_steps']}) x {tc['batch_size']} x {tc['seq_len']} tokens = "
        f"**{summary['tokens']:,} tokens**, wall time **{summary['wall_s'] / 60:.1f} min** on a shared 2-core CPU, "
        f"{tc['threads']} torch thread(s), fp32.",
        f"- AdamW (0.9, 0.95), peak lr {tc['lr']}, warmup {tc['warmup']}, cosine to {tc['min_lr_ratio']:.0%}, weight decay "
        f"{tc['weight_decay']}, grad clip {tc['grad_clip']}, per-layer balance loss x {tc['balance_coef']}, seed {tc['seed']}.",
    ]
    if log:
        rates = [r["tokens_per_s"] for r in log]
        lines.append(
            f"- Throughput {min(rates):.0f}–{max(rates):.0f} tokens/s (machine shared with other jobs); final train CE "
            f"{log[-1]['ce']:.2f}, balance term {log[-1]['balance']:.3f} (1.0 = uniform)."
        )
    lines += [
        "",
        "## Held-out loss (nats/token)",
        "| domain | model | unigram (domain's train frequencies) |",
        "|---|---|---|",
    ]
    for domain, r in eval_report["domains"].items():
        lines.append(f"| {domain} | {r['heldout_loss']:.3f} | {r['unigram_loss']:.3f} |")
    cfg = eval_report["config"]
    lines += [
        "",
        "## Prompt-lookup (n-gram) acceptance, greedy",
        f"{cfg['prompts']} held-out prompts of {cfg['prompt_tokens']} tokens per domain, {cfg['new_tokens']} new tokens, "
        f"{cfg['draft_tokens']} draft tokens from the longest recurring suffix n-gram (n <= 3), verified with transformers.",
        "",
        "| domain | accepted / proposed | tokens per forward | output == greedy generate |",
        "|---|---|---|---|",
    ]
    accept = {}
    for domain, r in eval_report["domains"].items():
        pl = r["prompt_lookup"]
        accept[domain] = pl["accept_rate"]
        lines.append(
            f"| {domain} | {pl['accept_rate']:.3f} ({pl['accepted']}/{pl['proposed']}) | {pl['tokens_per_forward']:.2f} | {r['lossless']} |"
        )
    lines += ["", separation_sentence(accept), ""]
    if stats:
        lines += _routing_section(stats)
    lines += ["## Sample completions (greedy)", ""]
    for domain, r in eval_report["domains"].items():
        for s in r["samples"]:
            lines += [f"**{domain}** prompt `{s['prompt']!r}`:", "```", s["prompt"] + s["completion"], "```", ""]
    lines += _drafts_section(draft_eval, inflation) + _reproduce_section(tc)
    return "\n".join(lines) + "\n"


def _routing_section(stats: dict) -> list[str]:
    s = stats["summary"]
    lines = [
        "## Routing (held-out text, mean over layers)",
        f"Uniform random top-k would reuse an expert between consecutive tokens with probability {s['uniform_reuse_any']:.2f}.",
        "",
        "| domain | consecutive reuse (>= 1 expert) | routing entropy (nats) | busiest expert / mean | INT4 draft top-k exact | INT4 top-k overlap |",
        "|---|---|---|---|---|---|",
    ]
    for domain in ("python", "prose", "arithmetic"):
        d = s[domain]
        lines.append(
            f"| {domain} | {d['reuse_any']:.3f} | {d['token_entropy']:.3f} | {d['imbalance']:.2f} "
            f"| {d.get('int4_topk_exact', float('nan')):.3f} | {d.get('int4_topk_overlap', float('nan')):.3f} |"
        )
    return [*lines, ""]


def _drafts_section(draft_eval: dict | None, inflation: dict | None) -> list[str]:
    lines = [
        "## Drafts and variants",
        "- `../moe-tiny-draft/`: dense `LlamaForCausalLM` on the same tokenizer and data, trained by the same script "
        "(`--arch dense`); see its training_summary.json.",
        "- INT4 self-draft (MoE-SpeQ): not shipped, produced on demand by `moe-serve model draft --out DIR` — experts "
        "quantized INT4, group 128, symmetric, stored dequantized in bf16; attention, norms, embeddings and router gates unchanged.",
        "- Inflated (memory-bound) variant: `moe-serve model inflate --out DIR --intermediate-size 2048` pads experts with zero "
        "units; logits and greedy output are unchanged.",
    ]
    if inflation and "verify" in inflation:
        v = inflation["verify"]
        old, new = inflation["intermediate_size"]
        lines.append(
            f"  Measured for {old} -> {new}: max |logit difference| {v['max_logit_diff']:.2e}, greedy output identical on "
            f"{v['greedy_identical']}/{v['prompts']} prompts (transformers, fp32), {inflation['safetensors_bytes'] / 2**20:.0f} MiB."
        )
    if draft_eval:
        losses = ", ".join(f"{d} {r['heldout_loss']:.3f}" for d, r in draft_eval["domains"].items())
        lines.append(f"- Dense draft held-out loss (nats/token): {losses}.")
    return [*lines, ""]


def _reproduce_section(tc: dict) -> list[str]:
    return [
        "## Reproduce",
        "```",
        "moe-serve model corpus            # ~2 min: corpus, tokenizer, token arrays under build/model/",
        f"moe-serve model train --arch moe --steps {tc['steps']} --batch-size {tc['batch_size']} --warmup {tc['warmup']} "
        f"--lr {tc['lr']} --seed {tc['seed']} --threads {tc['threads']} --max-minutes {tc['max_minutes']:g} --export DIR",
        "moe-serve model draft --target DIR --out INT4_DIR",
        "moe-serve model eval --model DIR && moe-serve model stats --model DIR --draft INT4_DIR",
        "```",
    ]


def render_draft_card(draft_dir: Path, run_dir: Path, draft_eval: dict | None) -> str:
    """Short card for the dense draft: architecture, training, held-out loss."""
    config = json.loads((draft_dir / "config.json").read_text())
    summary = json.loads((draft_dir / "training_summary.json").read_text())
    tc = summary["train_config"]
    log = _train_log(run_dir)
    lines = [
        "# moe-tiny-draft: dense draft for standalone speculation against moe-tiny",
        "",
        f"`LlamaForCausalLM`: hidden {config['hidden_size']}, {config['num_hidden_layers']} layers, MLP {config['intermediate_size']}, "
        f"{config['num_attention_heads']} heads x {config['head_dim']}, tied embeddings, {_params(draft_dir) / 1e6:.1f} M parameters, "
        "bf16 on disk. Same tokenizer and corpus as `../moe-tiny/` (see its card).",
        "",
        f"Trained by `moe-serve model train --arch dense`: {summary['steps']} steps (planned {summary['planned_steps']}) x "
        f"{tc['batch_size']} x {tc['seq_len']} = {summary['tokens']:,} tokens in {summary['wall_s'] / 60:.1f} min, peak lr {tc['lr']}, "
        f"seed {tc['seed']}, {tc['threads']} thread(s)" + (f", final train CE {log[-1]['ce']:.2f}." if log else "."),
    ]
    if draft_eval:
        lines += ["", "| domain | held-out loss (nats/token) | unigram |", "|---|---|---|"]
        lines += [
            f"| {d} | {r['heldout_loss']:.3f} | {r['unigram_loss']:.3f} |" for d, r in draft_eval["domains"].items()
        ]
    return "\n".join(lines) + "\n"
