"""Scratch (65th session): bench.budget before (old: the slot-by-slot redirect, dropped slots run at weight 0) and
after (new: the redirect in whole-tensor ops, a slot of weight 0 not run), runs in the order new1, old1, new2; per
model, batch, mode and budget the verify time and the time saved against the same run's verify without a budget.
Usage: python summary.py (from this folder) -> summary.txt"""

import json

RUNS = ("new1", "old1", "new2")
BUDGETS = (28, 24, 16, 12, 8)


def main() -> None:
    runs = {}
    for name in RUNS:
        with open(f"budget-{name}.json") as f:
            runs[name] = json.load(f)["rows"]
    print("model         batch  mode          budget  agreement  " + "  ".join(f"{n}_ms  {n}_saved" for n in RUNS))
    keys = [(r["model"], r["batch"], r["mode"], r["budget"]) for r in runs["new1"]]
    for key in keys:
        if key[2] != "none" and key[3] not in BUDGETS:
            continue
        cells, agreement = [], None
        for name in RUNS:
            row = next(r for r in runs[name] if (r["model"], r["batch"], r["mode"], r["budget"]) == key)
            agreement = row.get("greedy_agreement")
            cells.append(f"{row['verify_ms']:7.2f}  {row['time_saved']:+9.3f}")
        shown = "" if agreement is None else f"{agreement:.3f}"
        print(f"{key[0]:<13} {key[1]:>5}  {key[2]:<12}  {key[3]:>6}  {shown:>9}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
