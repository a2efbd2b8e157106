"""Greedy tree verification: accept the draft path the target model's argmax agrees with, then the bonus token.

Walk from the root; at each level take the first child (in sibling order) whose draft token equals the target's argmax
at the last accepted node; stop when none matches or num_spec_step - 1 drafts are accepted. Every accepted node's
predict is the target argmax there, so the last one carries the bonus token. Sequential per request by nature (a walk
over at most n tree nodes), vectorisation buys nothing at these sizes.
"""

import torch

from service.kernels._checks import INDEX_DTYPES, require, require_dtype


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,  # [bs*n] int32, written at accepted nodes
    accept_index: torch.Tensor,  # [bs, num_spec_step] int32, written (caller pre-fills -1)
    accept_token_num: torch.Tensor,  # [bs] int32, written: accepted drafts, bonus excluded
    candidates: torch.Tensor,  # [bs, n] draft tokens
    retrive_index: torch.Tensor,  # [bs, n] flat slot of each node
    retrive_next_token: torch.Tensor,  # [bs, n] first child, -1 = none
    retrive_next_sibling: torch.Tensor,  # [bs, n] next sibling, -1 = none
    target_predict: torch.Tensor,  # [bs, n] target argmax at each slot
) -> None:
    op = "verify_tree_greedy_cpu"
    for name, t in (("predicts", predicts), ("accept_index", accept_index), ("accept_token_num", accept_token_num)):
        require_dtype(t, (torch.int32,), op, name)
    require_dtype(candidates, INDEX_DTYPES, op, "candidates")
    require(candidates.dim() == 2 and accept_index.dim() == 2, op, "candidates and accept_index must be 2-D")
    bs, n = candidates.shape
    num_spec_step = accept_index.shape[1]
    cand = candidates.tolist()
    ri, nxt, sib = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    accepted_rows, predict_slots, predict_values, counts = [], [], [], []
    for b in range(bs):
        last = ri[b][0]
        path = [last]
        cur = 0
        for _ in range(1, num_spec_step):
            cur = nxt[b][cur]
            while cur != -1 and cand[b][cur] != target[last]:
                cur = sib[b][cur]
            if cur == -1:
                break
            last = ri[b][cur]
            path.append(last)
        accepted_rows.append(path)
        counts.append(len(path) - 1)
        predict_slots.extend(path)
        predict_values.extend(target[slot] for slot in path)
    for b, path in enumerate(accepted_rows):
        accept_index[b, : len(path)] = torch.tensor(path, dtype=torch.int32)
    accept_token_num.copy_(torch.tensor(counts, dtype=torch.int32))
    predicts[torch.tensor(predict_slots, dtype=torch.long)] = torch.tensor(predict_values, dtype=torch.int32)


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,  # [bs, accept_stride] int32
    accept_lens: torch.Tensor,  # [bs] int32, accepted tokens per request, bonus included
    bonus_tokens: torch.Tensor,  # [bs] int32, written
    accept_stride: int,
) -> None:
    """bonus_tokens[b] = the last accepted token of request b."""
    op = "fill_bonus_tokens_cpu"
    require(bool((accept_lens >= 1).all()), op, "every request accepts at least its bonus token")
    flat = accept_tokens.reshape(-1)
    rows = torch.arange(accept_lens.numel(), device=accept_lens.device)
    bonus_tokens.copy_(flat[rows * accept_stride + accept_lens.long() - 1])
