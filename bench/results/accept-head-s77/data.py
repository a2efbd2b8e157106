"""Scratch (77th session): rows for an acceptance predictor of the dense draft. For prompts from the corpus's
training documents (split "train") or held-out ones ("heldout"), moe-fine's greedy continuation (transformers,
float32) and one teacher-forced draft forward over prompt + continuation: at each root j the draft's final hidden
state (the LM head's input), its top-8 probabilities and whether its greedy token is the target's next token. A
chain's draft at any depth sees exactly this context as long as the drafts above it were accepted, so these rows are
the decisions a stop makes.
SPLIT "bench": bench.policies' prompts (prompt_sets(8, 400)), COUNT of each task from SKIP.
usage: PYTHONPATH=. python bench/results/accept-head-s77/data.py SPLIT COUNT SKIP OUT.pt"""

import itertools
import random
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from service.models.arithmetic import arithmetic_documents
from service.models.corpus import CorpusConfig, is_heldout, prose_documents, python_documents

TOKENS, PROMPT_CHARS, PROMPT_TOKENS = 48, 400, 128
ASSETS = "service/models/assets"
split, count, skip, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(2)
target = AutoModelForCausalLM.from_pretrained(f"{ASSETS}/moe-fine", dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained(f"{ASSETS}/moe-fine-draft", dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(f"{ASSETS}/moe-fine")
fraction = CorpusConfig().heldout_fraction


def documents(domain):
    named = {
        "python": ((d.name, d.text) for d in python_documents()),
        "prose": ((d.name, d.text) for d in prose_documents(0, man_pages=0)),
        "arithmetic": ((f"arithmetic:{i}", t) for i, t in enumerate(arithmetic_documents(0, 400_000))),
    }[domain]
    want = split == "heldout"
    return (t for n, t in named if is_heldout(n, 0, fraction) == want and len(t.strip()) >= PROMPT_CHARS)


@torch.no_grad()
def greedy(ids):
    res, out = target(input_ids=torch.tensor([ids]), use_cache=True), []
    for _ in range(TOKENS):
        out.append(int(res.logits[0, -1].argmax()))
        res = target(input_ids=torch.tensor([[out[-1]]]), past_key_values=res.past_key_values, use_cache=True)
    return out


def bench_prompts(domain):
    """split "bench": bench.policies' prompts (prompt_sets(8, 400), held-out windows), COUNT from SKIP"""
    from bench._heldout import prompt_sets

    task = {"python": "code", "arithmetic": "math", "prose": "prose"}[domain]
    return [tok(t)["input_ids"][:PROMPT_TOKENS] for t in prompt_sets(8, PROMPT_CHARS)[task]]


rows = {"hidden": [], "top": [], "label": [], "domain": [], "prompt": []}
rng = random.Random(7)
with torch.no_grad():
    for d, domain in enumerate(("python", "arithmetic", "prose")):
        if split == "bench":
            prompts = bench_prompts(domain)[skip : skip + count]
        else:
            docs = itertools.islice(documents(domain), skip, skip + count)
            prompts = []
            for doc in docs:
                start = rng.randrange(max(len(doc) - PROMPT_CHARS, 1))
                prompts.append(tok(doc[start : start + PROMPT_CHARS])["input_ids"][:PROMPT_TOKENS])
        for p, ids in enumerate(prompts):
            cont = greedy(ids)
            hidden = draft.model(input_ids=torch.tensor([ids + cont])).last_hidden_state[0]
            # root j = 0 .. TOKENS-2: context ids + cont[: j + 1], the draft predicts cont[j + 1]
            at = slice(len(ids), len(ids) + TOKENS - 1)
            probs = torch.softmax(draft.lm_head(hidden[at]), -1)
            rows["hidden"].append(hidden[at])
            rows["top"].append(probs.topk(8).values)
            rows["label"].append(probs.argmax(-1) == torch.tensor(cont[1:]))
            rows["domain"].append(torch.full((TOKENS - 1,), d))
            rows["prompt"].append(torch.full((TOKENS - 1,), p))
            print(domain, p, round(float(rows["label"][-1].float().mean()), 2), flush=True)
torch.save({k: torch.cat(v) for k, v in rows.items() if v}, out)
