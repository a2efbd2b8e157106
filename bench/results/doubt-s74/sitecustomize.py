"""Scratch (74th session), loaded in every process of a bench run (PYTHONPATH=bench/results/doubt-s74:.): registers
"moe-serve-nodoubt", moe-serve whose drafts need not beat K = 0 at the doubted acceptance (acceptance_doubt=0: as
before this session's change to moe_serve_allocate's margin), and "moe-serve-doubt2", at two standard errors, so that
one bench.policies run measures them interleaved with moe-serve on the same engines (run.py adds the variants). With
$RID_LOG set, each of them and moe-serve itself appends {"rid", "policy", "n", "k", "judged"} per request and decision
there, so that a step log's requests can be told apart by policy (rids.py); with $DECIDE_LOG set, each batch-1 decision
of a request with its own acceptance is appended there: tokens so far, p and its standard errors per position, the K
chosen, and for K = 0..cap the allocation's J at p and at p lowered by z standard errors for each z of DOUBTS
(doubt_scratch.py, whose classes these are), with the cost model's error margin (counterfactual.py replays the
allocation at each z). moe-serve-nodoubt, moe-serve-doubt2 and the decision log need doubt.diff applied."""

from service.policy import base

base._POLICIES["moe-serve"] = "doubt_scratch:Logged"
base._POLICIES["moe-serve-nodoubt"] = "doubt_scratch:NoDoubt"
base._POLICIES["moe-serve-doubt2"] = "doubt_scratch:DoubtTwo"
