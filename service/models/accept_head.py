"""The dense draft's acceptance head: the probability that the target's greedy verify accepts a draft, given that the
drafts above it in its chain were accepted, read from what the draft model has in hand when it makes that draft.

    p = sigmoid(w . f + b),  f = [l_1 .. l_8, l_1 - l_2, sum_i exp(l_i), h]

l_i: the draft's 8 highest log-probabilities at that draft; h: the draft model's final hidden state there (its LM
head's input, after the last norm). A logistic model, fitted by `build` on the corpus's training documents: prompt
windows, the target's greedy continuation (transformers, float32), and one forward of the draft over prompt +
continuation (teacher forcing). A chain's draft at any depth is made from exactly that context while the drafts
above it were accepted, so those rows are the decisions a stop makes (moe_sglang/draft_stop.py). Only the top-2
margin (l_1 - l_2) predicted rejection before it; the hidden state carries what the margin cannot see (the bench's
held-out prompts: bench/results/accept-head-s77).

Stored as `accept_head.safetensors` in the draft's checkpoint directory (weight [F] float32, bias [1]; the
features' standardisation folded in), with `accept_head.json` (how it was fitted, AUC on training and held-out rows).
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch

HEAD_FILE = "accept_head.safetensors"
REPORT_FILE = "accept_head.json"
TOP = 8  # log-probabilities among the features
EXTRA = TOP + 2  # features before the hidden state


def head_features(logprobs: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """f [R, EXTRA + H] from the draft's log-probabilities [R, V] and final hidden states [R, H] (module docstring)."""
    top = logprobs.float().topk(TOP, dim=-1).values  # [R, TOP]
    return torch.cat([top, top[:, :1] - top[:, 1:2], top.exp().sum(-1, keepdim=True), hidden.float()], dim=-1)


@dataclass(frozen=True)
class AcceptHead:
    weight: torch.Tensor  # [EXTRA + H] float32
    bias: float

    @property
    def hidden_size(self) -> int:
        return self.weight.numel() - EXTRA

    def probability(self, logprobs: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """[R] probability that each draft is accepted (logprobs [R, V], hidden [R, H])."""
        return torch.sigmoid(head_features(logprobs, hidden) @ self.weight + self.bias)

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        save_file({"weight": self.weight.contiguous(), "bias": torch.tensor([self.bias])}, str(directory / HEAD_FILE))

    @classmethod
    def load(cls, directory: Path) -> AcceptHead | None:
        """The head stored beside a draft checkpoint, or None where it has none."""
        path = Path(directory) / HEAD_FILE
        if not path.exists():
            return None
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        weight, bias = tensors["weight"].float(), tensors["bias"].float()
        if weight.dim() != 1 or weight.numel() <= EXTRA or bias.numel() != 1:
            raise ValueError(f"{path}: weight [F > {EXTRA}] and bias [1] expected, got {weight.shape}, {bias.shape}")
        return cls(weight, float(bias))


def fit(x: torch.Tensor, y: torch.Tensor, l2: float = 1e-4) -> AcceptHead:
    """Logistic regression of labels y [N] (1 = accepted) on features x [N, F]: standardised features, L2 penalty
    `l2` on the weights, L-BFGS to convergence (deterministic); the standardisation is folded into the head."""
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / std
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        opt.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y.float()) + l2 * (w * w).sum()
        value.backward()
        return value

    opt.step(loss)
    weight = (w / std).detach()
    return AcceptHead(weight, float(b.detach() - (mean * weight).sum()))


def auc(score: torch.Tensor, y: torch.Tensor) -> float:
    """Area under the ROC curve of `score` [N] for labels y [N] (ranks; ties broken by order)."""
    ranks = torch.empty(len(score), dtype=torch.float64)
    ranks[score.argsort()] = torch.arange(1, len(score) + 1, dtype=torch.float64)
    pos = y.bool()
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        raise ValueError("AUC needs both accepted and rejected rows")
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


@torch.no_grad()
def collect(target, draft, prompts: list[list[int]], tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features [N, F] and labels [N] (draft's greedy token == the target's next) at every root of each prompt's
    greedy continuation of `tokens` tokens (module docstring); `target`, `draft`: transformers causal LMs."""
    xs, ys = [], []
    for ids in prompts:
        cont = _greedy(target, ids, tokens)
        hidden = draft.model(input_ids=torch.tensor([ids + cont])).last_hidden_state[0]  # [P + T, H]
        at = slice(len(ids), len(ids) + tokens - 1)  # root j: context ids + cont[: j + 1], predicts cont[j + 1]
        logprobs = torch.log_softmax(draft.lm_head(hidden[at]).float(), dim=-1)
        xs.append(head_features(logprobs, hidden[at]))
        ys.append(logprobs.argmax(-1) == torch.tensor(cont[1:]))
    return torch.cat(xs), torch.cat(ys)


def _greedy(model, ids: list[int], tokens: int) -> list[int]:
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    emitted = []
    for _ in range(tokens):
        emitted.append(int(out.logits[0, -1].argmax()))
        out = model(input_ids=torch.tensor([emitted[-1:]]), past_key_values=out.past_key_values, use_cache=True)
    return emitted


def corpus_prompts(tokenizer, split: str, per_domain: int, seed: int, chars: int = 400, limit: int = 128):
    """{domain: [token ids]}: one window of `chars` characters (at most `limit` tokens) from each of the first
    `per_domain` documents of a corpus split ("train" or "heldout", the corpus's own seeded split) per domain."""
    from service.models.arithmetic import arithmetic_documents
    from service.models.corpus import CorpusConfig, is_heldout, prose_documents, python_documents

    config, rng = CorpusConfig(), random.Random(seed)
    sources = {
        "python": ((d.name, d.text) for d in python_documents()),
        "arithmetic": ((f"arithmetic:{i}", t) for i, t in enumerate(arithmetic_documents(config.seed, 400_000))),
        "prose": ((d.name, d.text) for d in prose_documents(config.seed, man_pages=0)),
    }
    prompts = {}
    for domain, named in sources.items():
        held = split == "heldout"
        docs = (t for n, t in named if is_heldout(n, config.seed, config.heldout_fraction) == held and len(t) >= chars)
        prompts[domain] = []
        for doc in itertools.islice(docs, per_domain):
            start = rng.randrange(len(doc) - chars + 1)
            prompts[domain].append(tokenizer(doc[start : start + chars])["input_ids"][:limit])
    return prompts


def build(target_dir: Path, draft_dir: Path, per_domain: int, tokens: int, seed: int, held_out: int) -> dict:
    """Fit the draft's head on `per_domain` training prompts per domain and write it beside the draft (HEAD_FILE,
    REPORT_FILE); the report reads it on `held_out` held-out prompts per domain against the top-2 margin alone."""
    import transformers

    load = transformers.AutoModelForCausalLM.from_pretrained
    target = load(str(target_dir), dtype=torch.float32).eval()
    draft = load(str(draft_dir), dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(target_dir))
    train = corpus_prompts(tokenizer, "train", per_domain, seed)
    x, y = collect(target, draft, [p for ps in train.values() for p in ps], tokens)
    head = fit(x, y)
    report = {
        "target": target_dir.name, "draft": draft_dir.name, "seed": seed, "tokens": tokens,
        "train": _reading(head, x, y, {d: len(p) for d, p in train.items()}),
    }  # fmt: skip
    if held_out:
        held = corpus_prompts(tokenizer, "heldout", held_out, seed + 1)
        hx, hy = collect(target, draft, [p for ps in held.values() for p in ps], tokens)
        report["heldout"] = _reading(head, hx, hy, {d: len(p) for d, p in held.items()})
    head.save(draft_dir)
    (draft_dir / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _reading(head: AcceptHead, x: torch.Tensor, y: torch.Tensor, prompts: dict[str, int]) -> dict:
    score = torch.sigmoid(x @ head.weight + head.bias)
    return {
        "prompts": prompts, "rows": len(y), "accepted": round(float(y.float().mean()), 4),
        "auc": round(auc(score, y), 4), "auc_margin": round(auc(x[:, TOP], y), 4),
    }  # fmt: skip


def card_lines(draft_dir: Path, target: str) -> list[str]:
    """The card's paragraph on the draft's acceptance head (service/models/accept_head.py), from its report; none
    where the draft has no head."""
    path = draft_dir / REPORT_FILE
    if not path.exists():
        return []
    report = json.loads(path.read_text())
    train, held = report["train"], report.get("heldout")
    per = sum(train["prompts"].values()) // len(train["prompts"])
    reading = (
        f"AUC on {held['rows']:,} held-out drafts {held['auc']:.3f} (the top-2 margin alone {held['auc_margin']:.3f})"
        if held
        else f"AUC on its training drafts {train['auc']:.3f} (the top-2 margin alone {train['auc_margin']:.3f})"
    )
    return [
        "",
        f"Acceptance head (`accept_head.safetensors`, `service/models/accept_head.py`): a logistic model of whether "
        f"`../{target}/`'s greedy verify accepts a draft, over the draft's final hidden state and top-8 "
        f"log-probabilities, fitted on {train['rows']:,} drafts ({per} training-document prompts per domain, "
        f"{report['tokens']} greedy target tokens each; {train['accepted']:.3f} accepted). {reading}. "
        f"`moe-serve model accept-head --prompts {per} --tokens {report['tokens']} --seed {report['seed']}` "
        f"reproduces it.",
    ]
