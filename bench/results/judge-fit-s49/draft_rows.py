"""Scratch timing (49th session): one forward of moe-fine's dense draft by moe_sglang/draft_forward.py outside the
engine, as the engine runs it (the C++ chain attention op and the bfloat16 copies for forwards of at most MAX_ROWS
rows, torch ops beyond), by the rows it runs after a prefix; cold (64 MB written between calls), one thread, median of
40 calls, median of 3. A chain draft step runs 1 row a request; a judgement runs the request's whole lag (its prompt,
~117-144 tokens on the bench's prompts, at a first judgement). Built on one_forward.py of draft-forward-s48.
usage: python draft_rows.py"""

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


new = dataclasses.replace(draft(), attention_op=True).narrowed()
for tokens, prefix in (
    (1, 130),
    (2, 130),
    (4, 130),
    (8, 130),
    (16, 130),
    (17, 113),
    (24, 106),
    (32, 98),
    (64, 66),
    (130, 0),
):
    call = forward(new, tokens, prefix)
    runs = [median_ms(call, 40, True) for _ in range(3)]
    print(f"{tokens} rows after {prefix}: cold {statistics.median(runs):.3f} ms", flush=True)
