"""Scratch (66th session): samples per part in the committed py-spy stacks (raw format, 250 Hz: a sample stands for
4 ms). Usage: python parts.py > parts.txt"""

import gzip

PARTS = (
    "verify_step (moe_sglang/verify.py",
    "_verify_forward (moe_sglang/verify.py",
    "accept_on_dense_rows (moe_sglang/accept.py",
    "move_accept_tokens_to_target_kvcache (",
    "eagle_sample (",
    "reconstruct_indices_from_tree_mask_func (",
    "_tree_indices (moe_sglang/verify.py",
    "_slots (moe_sglang/draft_model.py",
    "RaggedVerify.from_lens (",
    "DraftModelDrafter.draft (",
    "plain_step (moe_sglang/verify.py",
)
FILES = ("stacks-moe-serve-b1.raw.gz", "stacks-static-k3-d53a4e2.raw.gz", "stacks-static-k3-df4c863.raw.gz")


def counts(path: str) -> dict[str, int]:
    out = dict.fromkeys(PARTS, 0)
    with gzip.open(path, "rt") as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            for part in PARTS:
                if part in stack:
                    out[part] += int(n)
    return out


def main() -> None:
    table = {path: counts(path) for path in FILES}
    print("samples (x 4 ms)".ljust(44) + "".join(p.split(".raw")[0][7:].rjust(24) for p in FILES))
    for part in PARTS:
        print(part.split(" (")[0].ljust(44) + "".join(str(table[p][part]).rjust(24) for p in FILES))


if __name__ == "__main__":
    main()
