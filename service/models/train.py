"""Train the embedded Mixtral-architecture MoE (and, with another spec, its dense draft) on the offline corpus.

Reproducible: init from `torch.manual_seed(seed)` (or from a checkpoint, `init`), batches from `(seed, step)`
(batches.py), and a checkpoint holding model, optimizer and step so a resumed run continues the same trajectory. The
loss is next-token cross-entropy plus `balance_coef` times the per-layer balance term (balance.py) for MoE models;
with a `teacher` (distillation, for a draft: what it must predict is the target's next token, not the corpus's) it is
the forward KL divergence KL(teacher || model) of the next-token distributions at every position.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from service.models.balance import per_layer_balance_loss
from service.models.batches import TokenData


@dataclass(frozen=True)
class MoESpec:
    hidden_size: int = 256  # model width
    num_layers: int = 4  # decoder layers, each with an MoE block
    num_experts: int = 8  # experts per layer
    top_k: int = 2  # experts per token
    intermediate_size: int = 512  # per-expert FFN width
    num_heads: int = 4  # attention heads; KV heads equal (SGLang's CPU paths are safest with MHA)
    head_dim: int = 64  # per head
    context: int = 256  # max positions

    def to_config(self, vocab_size: int, eos_id: int):
        from transformers import MixtralConfig

        return MixtralConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            head_dim=self.head_dim,
            num_local_experts=self.num_experts,
            num_experts_per_tok=self.top_k,
            max_position_embeddings=self.context,
            tie_word_embeddings=True,
            bos_token_id=eos_id,
            eos_token_id=eos_id,
            pad_token_id=eos_id,
            router_aux_loss_coef=0.0,  # we add our own per-layer term
            output_router_logits=False,
            sliding_window=None,
        )


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000  # optimizer steps (the LR schedule spans exactly these)
    batch_size: int = 16  # sequences per step
    seq_len: int = 256  # tokens per sequence
    lr: float = 2e-3  # peak learning rate
    min_lr_ratio: float = 0.1  # cosine floor as a share of lr
    warmup: int = 50  # linear warmup steps
    weight_decay: float = 0.1  # AdamW decoupled decay on matrices
    grad_clip: float = 1.0  # global grad-norm clip
    balance_coef: float = 0.01  # weight of the per-layer balance loss
    seed: int = 0  # init and data order
    threads: int = 1  # torch intra-op threads
    log_every: int = 10  # steps between log lines
    checkpoint_every: int = 50  # steps between resumable checkpoints
    max_minutes: float = 0.0  # stop early (with checkpoint) after this wall time; 0 = no limit


def lr_at(step: int, config: TrainConfig) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95))


def step_loss(model, batch: torch.Tensor, balance_coef: float) -> tuple[torch.Tensor, float, float]:
    """(total loss, cross-entropy, balance term) for one [B, S+1] batch."""
    is_moe = hasattr(model.config, "num_local_experts")
    out = model(input_ids=batch[:, :-1], output_router_logits=True) if is_moe else model(input_ids=batch[:, :-1])
    logits = out.logits  # [B, S, V]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
    if not is_moe:
        return ce, ce.item(), 0.0
    balance = per_layer_balance_loss(out.router_logits, model.config.num_experts_per_tok)
    return ce + balance_coef * balance, ce.item(), balance.item()


def distill_loss(model, teacher, batch: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(KL(teacher || model) per position, its value, 0) for one [B, S+1] batch; the teacher runs without gradients."""
    inputs = batch[:, :-1]
    with torch.no_grad():
        target = torch.log_softmax(teacher(input_ids=inputs).logits.float(), dim=-1).flatten(0, 1)
    student = torch.log_softmax(model(input_ids=inputs).logits.float(), dim=-1).flatten(0, 1)
    kl = torch.nn.functional.kl_div(student, target, log_target=True, reduction="batchmean")
    return kl, kl.item(), 0.0


def _save_checkpoint(path: Path, model, optimizer, step: int) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)  # atomic, so a kill mid-save leaves the previous checkpoint intact


def train(
    model_config, data: TokenData, config: TrainConfig, out_dir: Path, init: Path | None = None, teacher=None
) -> dict:
    """Train from scratch (or from the HF checkpoint `init`, whose config then replaces `model_config`), or resume
    from out_dir/checkpoint.pt; with `teacher` (a causal LM on the same vocabulary) distil it (module docstring).
    Returns a summary dict (also in summary.json)."""
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(config.threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    if init is not None:
        model = AutoModelForCausalLM.from_pretrained(str(init), dtype=torch.float32)
        head, embedding = model.get_output_embeddings().weight, model.get_input_embeddings().weight
        if head is not embedding and torch.equal(head, embedding):  # exported untied (untied_copy): tie it again
            model.config.tie_word_embeddings = True
            model.tie_weights()
    else:
        model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32)
    if teacher is not None:
        if teacher.config.vocab_size != model.config.vocab_size:
            raise ValueError(f"teacher vocab {teacher.config.vocab_size} != model vocab {model.config.vocab_size}")
        teacher.eval()
    optimizer = _optimizer(model, config)
    ckpt_path, log_path = out_dir / "checkpoint.pt", out_dir / "train_log.jsonl"
    start, prior_seconds = 0, 0.0
    if ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        prior_seconds = _logged_seconds(log_path)
    model.train()
    began, window_start, window_tokens = time.monotonic(), time.monotonic(), 0
    step = start
    for step in range(start, config.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        batch = data.batch(config.seed, step, config.batch_size, config.seq_len)
        if teacher is None:
            loss, ce, balance = step_loss(model, batch, config.balance_coef)
        else:
            loss, ce, balance = distill_loss(model, teacher, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        window_tokens += batch[:, :-1].numel()
        done = step + 1
        elapsed = time.monotonic() - began
        if done % config.log_every == 0 or done == config.steps:
            now = time.monotonic()
            record = {
                "step": done,
                ("ce" if teacher is None else "kl"): round(ce, 4),
                "balance": round(balance, 4),
                "lr": lr_at(step, config),
                "tokens_per_s": round(window_tokens / (now - window_start), 1),
                "wall_s": round(prior_seconds + elapsed, 1),
            }
            with log_path.open("a") as log:
                log.write(json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)
            window_start, window_tokens = now, 0
        out_of_time = config.max_minutes > 0 and elapsed > config.max_minutes * 60
        if done % config.checkpoint_every == 0 or done == config.steps or out_of_time:
            _save_checkpoint(ckpt_path, model, optimizer, done)
        if out_of_time:
            break
    finished = step + 1 if config.steps > start else start
    summary = {
        "steps": finished,
        "planned_steps": config.steps,
        "tokens": finished * config.batch_size * config.seq_len,
        "init": str(init) if init is not None else None,
        "distilled_from": teacher.config.name_or_path if teacher is not None else None,
        "wall_s": round(prior_seconds + time.monotonic() - began, 1),
        "train_config": asdict(config),
    }
    if init is not None and (Path(init) / "training_summary.json").exists():  # how the starting point was trained
        summary["init_summary"] = json.loads((Path(init) / "training_summary.json").read_text())
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    model.eval()
    return {"model": model, **summary}


def _logged_seconds(log_path: Path) -> float:
    if not log_path.exists():
        return 0.0
    lines = log_path.read_text().strip().splitlines()
    return json.loads(lines[-1])["wall_s"] if lines else 0.0


def untied_copy(model):
    """A copy of `model` whose output head is stored as its own tensor (same values as the embedding).

    SGLang 0.5.23's MixtralForCausalLM ignores `tie_word_embeddings`: from a tied checkpoint (no `lm_head.weight` on
    disk) it leaves the head unloaded and generates garbage. An explicit head costs vocab x hidden values on disk and
    changes nothing in transformers. The training model itself stays tied."""
    import copy

    model = copy.deepcopy(model)
    if model.config.tie_word_embeddings:
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    return model


def export_hf(model, tokenizer, out_dir: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """Save a Hugging Face checkpoint (config, safetensors, tokenizer, generation config) in `dtype`."""
    from transformers import GenerationConfig

    from service.models.tokenizer import save_hf_tokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    untied_copy(model).to(dtype).save_pretrained(str(out_dir), safe_serialization=True)
    eos = model.config.eos_token_id
    GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, do_sample=False).save_pretrained(
        str(out_dir)
    )
    save_hf_tokenizer(tokenizer, out_dir)
