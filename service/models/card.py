"""Render the shipped model card (README.md) from the measured reports, so every number in it comes from a file."""

from __future__ import annotations

import json
from pathlib import Path

INTROS = {
    "moe-tiny": (
        "the embedded default MoE of moe-serve",
        [
            "A small Mixtral-architecture MoE trained from scratch by `moe-serve model train` on offline text (issue 3), so the",
            "service has a real MoE to serve and speculation has task-dependent acceptance. It is a *tiny* model: expect fluent-looking",
            "but often wrong text; its value is realistic routing and acceptance structure, not answers.",
        ],
    ),
    "moe-fine": (
        "the fine-grained sparse bundled MoE of moe-serve",
        [
            "A second bundled Mixtral-architecture MoE (issue 16), trained by the same script, tokenizer and corpus as moe-tiny, but",
            "sparse the way OLMoE and Qwen3-MoE are: many small experts and a larger top-k, so a verify of a few draft tokens",
            "wakes many distinct experts (the regime where speculation costs an MoE something). Tiny like moe-tiny: its value is",
            "routing and acceptance structure, not answers.",
        ],
    ),
}

# Below this spread in prompt-lookup accept rate between the best and worst domain, the card calls separation weak.
WEAK_SEPARATION = 0.05


def param_count(model_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 - safe_open is not a dict


def _numel(shape: list[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def train_log(run_dir: Path) -> list[dict]:
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
    acceptance: dict | None = None,
    int4_group_size: int = 128,
    baseline_eval: dict | None = None,
) -> str:
    config = json.loads((model_dir / "config.json").read_text())
    name = model_dir.resolve().name
    headline, intro = INTROS.get(name, ("a Mixtral-architecture MoE trained by moe-serve", []))
    summary = json.loads((model_dir / "training_summary.json").read_text())
    manifest = json.loads((work / "manifest.json").read_text())
    log = train_log(run_dir)
    tc = summary["train_config"]
    lines = [
        f"# {name}: {headline}",
        "",
        *intro,
        "",
        "## Architecture",
        f"`MixtralForCausalLM`: hidden {config['hidden_size']}, {config['num_hidden_layers']} layers, "
        f"{config['num_local_experts']} experts top-{config['num_experts_per_tok']}, expert intermediate {config['intermediate_size']}, "
        f"{config['num_attention_heads']} heads x {config['head_dim']} (KV heads = heads), context {config['max_position_embeddings']}, "
        f"vocab {config['vocab_size']} (byte-level BPE, digits split), tied embeddings, {param_count(model_dir) / 1e6:.1f} M parameters, bf16 on disk.",
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
    lines += ["", "## Held-out loss (nats/token)"]
    if baseline_eval:
        base = Path(baseline_eval.get("model", "baseline")).name
        lines += [f"| domain | model | unigram (domain's train frequencies) | {base} |", "|---|---|---|---|"]
        for domain, r in eval_report["domains"].items():
            other = baseline_eval["domains"][domain]["heldout_loss"]
            lines.append(f"| {domain} | {r['heldout_loss']:.3f} | {r['unigram_loss']:.3f} | {other:.3f} |")
    else:
        lines += ["| domain | model | unigram (domain's train frequencies) |", "|---|---|---|"]
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
    lines += ["", separation_sentence(accept), "", *caveats(summary), ""]
    if acceptance:
        lines += _acceptance_section(acceptance)
    if stats:
        lines += _routing_section(stats)
    lines += ["## Sample completions (greedy)", ""]
    for domain, r in eval_report["domains"].items():
        for s in r["samples"]:
            lines += [f"**{domain}** prompt `{s['prompt']!r}`:", "```", s["prompt"] + s["completion"], "```", ""]
    lines += _drafts_section(name, draft_eval, inflation, int4_group_size)
    lines += _reproduce_section(tc, config, int4_group_size)
    return "\n".join(lines) + "\n"


def caveats(summary: dict) -> list[str]:
    lines = [
        "Caveats: greedy completions of a model this small fall into loops (see the samples) and prompt lookup copies loops, so",
        "part of the acceptance on code and prose reflects repetition rather than skill; the arithmetic gap (answers are new",
        "numbers the prompt does not contain) is the robust separation.",
    ]
    if summary["steps"] < summary["planned_steps"]:
        lines.append(
            f"Training stopped at the wall-time cap at step {summary['steps']} of {summary['planned_steps']}; with `--max-minutes 0` "
            "the full schedule runs and the result depends only on the seed."
        )
    return lines


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
    lines.append("")
    if "top_half_mass" in s["python"]:
        lines += _verify_routing_lines(s, stats)
    return [*lines, ""]


def _verify_routing_lines(s: dict, stats: dict) -> list[str]:
    """MoE-Spec's top-half router mass and MoESD's N(t) against measured unique experts per verify size."""
    domains = ("python", "prose", "arithmetic")
    sizes = list(s["python"]["top_half_mass"])
    lines = [
        "### Over a verify of t tokens (non-overlapping runs of t consecutive held-out tokens, mean over layers)",
        "Top-half mass: share of the run's summed router probability held by its E/2 heaviest experts (0.5 = flat; MoE-Spec's",
        "expert budget relies on it being high). Top-half slots: share of the run's routed top-k slots that fall in its E/2",
        "most-used experts, i.e. what a budget B = E/2 keeps without substitution.",
        "",
        "| domain | "
        + " | ".join(f"top-half mass t={t}" for t in sizes)
        + " | "
        + " | ".join(f"top-half slots t={t}" for t in sizes)
        + " |",
        "|---|" + "---|" * (2 * len(sizes)),
    ]
    for d in domains:
        mass = " | ".join(f"{s[d]['top_half_mass'][t]:.3f}" for t in sizes)
        slots = " | ".join(f"{s[d]['top_half_slots'][t]:.3f}" for t in sizes)
        lines.append(f"| {d} | {mass} | {slots} |")
    shown = [
        t
        for t in (1, 2, 4, 8, 16, 32, 64)
        if t in s["python"]["unique_measured"] or str(t) in s["python"]["unique_measured"]
    ]

    def at(table, t):
        return table[t] if t in table else table[str(t)]

    lines += [
        "",
        "Unique experts touched by a verify of t tokens: MoESD's N(t) = E (1 - (1 - k/E)^t) (independent uniform routing)",
        "against the measured mean over layers; E_eff is the expert count for which N(t) fits the measurement best (least",
        "squares over t = 1..64): routing reuses experts across consecutive tokens as if only E_eff experts existed.",
        "",
        "| t | MoESD N(t) | " + " | ".join(f"{d} measured" for d in domains) + " |",
        "|---|---|" + "---|" * len(domains),
    ]
    for t in shown:
        measured = " | ".join(f"{at(s[d]['unique_measured'], t):.1f}" for d in domains)
        lines.append(f"| {t} | {at(s['python']['unique_moesd'], t):.1f} | {measured} |")
    lines += ["", "E_eff: " + ", ".join(f"{d} {s[d]['effective_experts']:.1f}" for d in domains) + "."]
    return lines


def _acceptance_section(acceptance: dict) -> list[str]:
    """Accepted tokens per verify, per domain and drafter, measured in the SGLang engine (bench.draft_acceptance)."""
    cfg = acceptance["config"]
    drafters = list(acceptance["drafters"])
    domains = list(next(iter(acceptance["drafters"].values()))["domains"])
    lines = [
        "## Acceptance per drafter, SGLang engine (greedy)",
        f"`python -m bench.draft_acceptance`: {cfg['prompts']} held-out prompts per domain (the last "
        f"{cfg.get('prompt_tokens', '?')} tokens of a {cfg['prompt_chars']}-character window), batch 1, "
        f"{cfg['new_tokens']} new tokens, {cfg['num_draft_tokens']} tokens verified per step ({cfg['num_draft_tokens'] - 1} "
        "drafted); the number is SGLang's accepted length per verify step (tokens emitted per step, 1 = nothing accepted).",
        "",
        "| drafter | " + " | ".join(domains) + " |",
        "|---|" + "---|" * len(domains),
    ]
    for drafter in drafters:
        cells = acceptance["drafters"][drafter]["domains"]
        lines.append(f"| {drafter} | " + " | ".join(f"{cells[d]['accept_length']:.2f}" for d in domains) + " |")
    return [*lines, ""]


def _drafts_section(name: str, draft_eval: dict | None, inflation: dict | None, group_size: int) -> list[str]:
    lines = [
        "## Drafts and variants",
        f"- `../{name}-draft/`: dense `LlamaForCausalLM` on the same tokenizer and data, trained by the same script "
        "(`--arch dense`); how (and whether it was distilled from this model): its card and training_summary.json.",
        "- INT4 self-draft (MoE-SpeQ): not shipped, produced on demand by `moe-serve model draft --out DIR` — experts "
        f"quantized INT4, group {group_size}, symmetric, stored dequantized in bf16; attention, norms, embeddings and router gates unchanged.",
        "- Inflated (memory-bound) variant: `moe-serve model inflate --out DIR --intermediate-size N` pads experts with zero "
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


def shape_flags(config: dict) -> str:
    """The `moe-serve model train` shape options that rebuild `config` where it differs from MoESpec's defaults."""
    from service.models.train import MoESpec

    default = MoESpec()
    pairs = [
        ("--hidden-size", config["hidden_size"], default.hidden_size),
        ("--layers", config["num_hidden_layers"], default.num_layers),
        ("--heads", config["num_attention_heads"], default.num_heads),
        ("--experts", config["num_local_experts"], default.num_experts),
        ("--top-k", config["num_experts_per_tok"], default.top_k),
        ("--intermediate-size", config["intermediate_size"], default.intermediate_size),
    ]
    return "".join(f" {flag} {value}" for flag, value, base in pairs if value != base)


def _reproduce_section(tc: dict, config: dict, group_size: int = 128) -> list[str]:
    group = "" if group_size == 128 else f" --group-size {group_size}"
    return [
        "## Reproduce",
        "```",
        "moe-serve model corpus            # ~2 min: corpus, tokenizer, token arrays under build/model/",
        f"moe-serve model train --arch moe{shape_flags(config)} --steps {tc['steps']} --batch-size {tc['batch_size']} "
        f"--warmup {tc['warmup']} --lr {tc['lr']} --seed {tc['seed']} --threads {tc['threads']} "
        f"--max-minutes {tc['max_minutes']:g} --export DIR",
        f"moe-serve model draft --target DIR --out INT4_DIR{group}",
        "moe-serve model eval --model DIR && moe-serve model stats --model DIR --draft INT4_DIR",
        "```",
    ]
