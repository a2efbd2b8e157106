"""Scratch (65th session): how often the dense STANDALONE draft's greedy token equals the target's on the replay's
prompts (bench.replay's trace_prompts: held-out text cut to each request's trace input length), teacher-forced over
the target's 24 greedy tokens, in transformers (moe-fine: x48 computes the same function); the same with only each
prompt's last 100 tokens, and per output position 0-7. Usage: PYTHONPATH=. python agreement.py"""

import torch
import transformers

from bench import replay
from bench._models import deciding_setup, read_checkpoint

OUTPUT = 24


def main() -> None:
    setup = deciding_setup()
    tok = transformers.AutoTokenizer.from_pretrained(setup.model)
    context = read_checkpoint(setup.model).context
    streams = replay.heldout_streams(tok)
    target = transformers.AutoModelForCausalLM.from_pretrained(setup.model, dtype=torch.float32).eval()
    draft = transformers.AutoModelForCausalLM.from_pretrained(setup.draft_model, dtype=torch.float32).eval()
    for name, file in replay.TRACES.items():
        s = replay.fitted_schedule(replay.default_traces() / file, context - replay.INPUT_ROOM, OUTPUT, 12)
        prompts = replay.trace_prompts(s, streams)
        for cut in (None, 100):
            hits = []
            for p in prompts:
                p = p if cut is None else p[-cut:]
                with torch.no_grad():
                    full = target.generate(torch.tensor([p]), max_new_tokens=OUTPUT, do_sample=False)[0]
                    predicted = draft(full[None, :-1]).logits[0, len(p) - 1 :].argmax(-1)
                hits.append((predicted == full[len(p) :]).int().tolist())
            mean = sum(map(sum, hits)) / sum(map(len, hits))
            by_position = [round(sum(h[i] for h in hits) / len(hits), 2) for i in range(8)]
            print(
                f"{name}: prompts {'whole' if cut is None else f'last {cut} tokens'} (lengths "
                f"{sorted({len(p) for p in prompts})}): draft == target {mean:.3f}; by position 0-7 {by_position}"
            )


if __name__ == "__main__":
    main()
