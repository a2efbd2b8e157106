"""Scratch timing (48th session): one forward of moe-fine's dense draft by moe_sglang/draft_forward.py outside the
engine (its weights from the checkpoint, a KV pool of zeros), in torch ops with float32 weights (`old`) and with the
C++ attention op and bfloat16-exact MLP / LM head weights (`new`); one thread, median of 100 calls, 5 times; `cold`
writes 64 MB between calls (the weights evicted, as after a target verify). usage: python one_forward.py"""

import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from moe_sglang.draft_forward import DirectDraft, DraftLayer  # noqa: E402
from service.kernels.small_gemm import GemmPlan  # noqa: E402

torch.set_num_threads(1)
DRAFT = Path(__file__).resolve().parents[3] / "service/models/assets/moe-fine-draft"
CONFIG = json.loads((DRAFT / "config.json").read_text())
WEIGHTS = {k: v.float() for k, v in load_file(DRAFT / "model.safetensors").items()}
HEADS, DIM, LAYERS = CONFIG["num_attention_heads"], CONFIG["head_dim"], CONFIG["num_hidden_layers"]
SLOTS = 4096
KEYS = [torch.zeros(SLOTS, HEADS, DIM) for _ in range(LAYERS)]
VALUES = [torch.zeros(SLOTS, HEADS, DIM) for _ in range(LAYERS)]
POOL = type("Pool", (), {"get_key_buffer": lambda _, i: KEYS[i], "get_value_buffer": lambda _, i: VALUES[i]})()
REQ_TO_TOKEN = torch.arange(256 * 8, dtype=torch.int32).view(8, 256)
EVICT = torch.empty(64 * 2**20 // 4)


def draft() -> DirectDraft:
    layers = []
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        attn = [WEIGHTS[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]
        mlp = [WEIGHTS[p + f"mlp.{x}_proj.weight"] for x in ("gate", "up")]
        layers.append(
            DraftLayer(
                WEIGHTS[p + "input_layernorm.weight"],
                torch.cat(attn),
                WEIGHTS[p + "self_attn.o_proj.weight"],
                WEIGHTS[p + "post_attention_layernorm.weight"],
                torch.cat(mlp),
                WEIGHTS[p + "mlp.down_proj.weight"],
                i,
            )  # fmt: skip
        )
    inv = 1.0 / (CONFIG["rope_parameters"]["rope_theta"] ** (torch.arange(0, DIM, 2).float() / DIM))
    angles = torch.outer(torch.arange(256).float(), inv)
    lm_head = WEIGHTS["lm_head.weight"]
    products = [w for x in layers for w in (x.qkv, x.o, x.gate_up, x.down)] + [lm_head]
    return DirectDraft(
        WEIGHTS["model.embed_tokens.weight"], tuple(layers), WEIGHTS["model.norm.weight"], lm_head,
        CONFIG["vocab_size"], HEADS, HEADS, DIM, CONFIG["rms_norm_eps"], torch.cat([angles.cos(), angles.sin()], -1),
        lambda: POOL, GemmPlan().tune(products),
    )  # fmt: skip


def forward(model: DirectDraft, tokens: int, prefix: int):
    ids, positions = torch.randint(0, 8000, (tokens,)), torch.arange(prefix, prefix + tokens)
    loc = REQ_TO_TOKEN[0, prefix : prefix + tokens].long()
    mask = torch.ones(tokens, tokens, dtype=torch.bool).tril().reshape(-1)
    rows = torch.tensor([tokens - 1])
    pools = torch.tensor([0])
    return lambda: model.logits(ids, positions, loc, REQ_TO_TOKEN, pools, [prefix], [tokens], mask, rows, True)


def median_ms(call, n: int, cold: bool) -> float:
    times = []
    for _ in range(n):
        if cold:
            EVICT.add_(1.0)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


old = draft()
new = dataclasses.replace(draft(), attention_op=True).narrowed()
print("narrow copies:", new.narrow is not None)
for tokens in (1, 4, 8):
    calls = forward(old, tokens, 100), forward(new, tokens, 100)
    for cold in (False, True):
        runs = [[median_ms(call, 100, cold) for call in calls] for _ in range(5)]
        old_ms, new_ms = (statistics.median(r[i] for r in runs) for i in (0, 1))
        print(f"{tokens} tokens after 100, {'cold' if cold else 'warm'}: old {old_ms:.3f} ms, new {new_ms:.3f} ms")
