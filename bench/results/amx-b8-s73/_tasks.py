"""Scratch helper (73rd session): a bench.policies step log's batch-1 requests by task. Its engine runs each task's
batch-1 requests together, code, math, prose (then that task's batch-8 waves), so the batch-1 stretches between
multi-request steps are taken as the tasks, in that order; later ones (a wave's last request) as "tail"."""

from _waves import rows  # ../zen5-b8-s72's helper (PYTHONPATH)

TASKS = ("code", "math", "prose")


def batch1_by_task(path: str) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """(request id -> its batch-1 steps, request id -> task)."""
    reqs: dict[str, list[dict]] = {}
    task_of: dict[str, str] = {}
    stretches, in_stretch = 0, False
    for r in rows(path):
        if len(r["rids"]) > 1:
            in_stretch = False
            continue
        stretches += 0 if in_stretch else 1
        in_stretch = True
        rid = r["rids"][0]
        reqs.setdefault(rid, []).append(r)
        task_of.setdefault(rid, TASKS[stretches - 1] if stretches <= len(TASKS) else "tail")
    return reqs, task_of
