#!/usr/bin/env bash
# Operations inside layers in a real training trace (docs/tracing.md,
# "Operations"): `fivefold train --trace` on one rank of a tiny MoE model.
#
# usage: ops_trace_test.sh FIVEFOLD MODE [MPIEXEC]
#   one   one rank without MPI: every FWD action holds GEMM events whose
#         FLOPs (2mnk, with the grouped expert GEMMs and the LM head) add up
#         to the model's forward matmul FLOPs less attention's score/value
#         products (model/flops.c by hand, within 2%), one attn_fwd per
#         layer, router and MoE phases per MoE layer; every op lies inside
#         the action on its rank that encloses it; nothing dropped; then
#         `calibrate --from-trace` on that trace refits the GEMM curve
#   tp2   TP2 on 2 ranks under mpirun: ALLGATHER / REDUCE_SCATTER op
#         events on the tp group with the row exchange's bytes
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MODE=$2
MPIEXEC=${3:-mpirun}
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
work_dir ops-trace

make_corpus
# Dropless routing (the default capacity factor 0): every token reaches top_k experts
# and the expert GEMM rows are exactly N * top_k.
moe_json moe.json 3 4
run_json run.json moe.json steps=3 warmup_steps=1 eval_batches=1 grad_clip=- global_batch_size=8 interval=0 \
  keep_last=1

case "$MODE" in
one)
  "$FIVEFOLD" train --config run.json --out out --no-progress --trace t.json --trace-steps 1:2 >train.log 2>&1 ||
    { tail -20 train.log; echo "FAIL: traced training"; exit 1; }
  $PY - t.json <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
cfg = json.load(open("moe.json"))
B, T = 2, 16
C, L, H, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["vocab_size"]
D, K, Fe = C // H, cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
# model/flops.c per sequence, forward = a third: 4 s h d (a + g) + 4 s^2 a d
# + 6 s h (top_k f) per layer, 2 s h V for the head. The attention products
# (4 s^2 a d) are not GEMM events: the fused attention kernel does them.
per_seq = 2 * T * C * V + L * (4 * T * C * D * (H + H) + 6 * T * C * K * Fe)
expected = B * per_seq
acts = [e for e in ev if e["cat"] != "op"]
ops = [e for e in ev if e["cat"] == "op"]
assert ops, "no op events in the trace"
dropped = [r["dropped"] for r in d["otherData"]["ranks"]]
assert dropped, "no per-rank records in otherData"
assert not any(dropped), f"events dropped: {dropped}"
eps = 0.002  # microseconds: the writer rounds to the nanosecond
def inside(o, a):
    return a["pid"] == o["pid"] and o["ts"] >= a["ts"] - eps and o["ts"] + o["dur"] <= a["ts"] + a["dur"] + eps
fwd = [a for a in acts if a["cat"] == "FWD"]
assert len(fwd) == 2 * 4, f"{len(fwd)} FWD actions, expected 8 (2 steps x 4 micro-batches)"
for o in ops:
    enclosing = [a for a in acts if inside(o, a) and a["args"]["iter"] == o["args"]["iter"]]
    assert enclosing, f"op {o['name']} at {o['ts']} lies in no action"
for a in fwd:
    mine = [o for o in ops if inside(o, a)]
    flops = sum(2 * o["args"]["m"] * o["args"]["n"] * o["args"]["k"] for o in mine
                if o["name"] in ("gemm", "moe_experts", "lm_head"))
    rel = abs(flops - expected) / expected
    assert rel < 0.02, f"{a['name']} iter {a['args']['iter']}: GEMM FLOPs {flops} vs model {expected} ({rel:.1%})"
    for o in mine:
        assert o["args"].get("mb") == a["args"]["mb"], f"op {o['name']} carries mb {o['args'].get('mb')} in {a['name']}"
    for l in range(L):
        per = {}
        for o in mine:
            if o["args"].get("layer") == l:
                per[o["name"]] = per.get(o["name"], 0) + 1
        for name, n in (("attn_fwd", 1), ("router", 1), ("moe_permute", 1), ("moe_experts", 1), ("moe_unpermute", 1),
                        ("rope", 2), ("norm", 2), ("gemm", 4)):
            assert per.get(name) == n, f"{a['name']} layer {l}: {per.get(name)} {name} events, expected {n} ({per})"
bwd = [a for a in acts if a["cat"] == "BWD"]
for a in bwd:
    names = {o["name"] for o in ops if inside(o, a)}
    assert {"attn_bwd", "gemm", "moe_experts", "router"} <= names, f"{a['name']}: {names}"
print(f"ok: {len(ops)} op events in {len(acts)} actions; forward GEMM FLOPs {expected} per action")
PY
  "$FIVEFOLD" calibrate --from-trace t.json --out refit.json >cal.log 2>&1 || { cat cal.log; echo "FAIL: calibrate --from-trace"; exit 1; }
  grep -E "GEMM efficiency refitted from [0-9]+ GEMM events" cal.log || { cat cal.log; echo "FAIL: no GEMM refit"; exit 1; }
  [ -s refit.json ] || { echo "FAIL: no refit.json"; exit 1; }
  ;;
tp2)
  "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out out --no-progress --tp 2 --trace t.json \
    --trace-steps 1:1 >train.log 2>&1 || { tail -20 train.log; echo "FAIL: traced TP2 training"; exit 1; }
  $PY - t.json <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
ops = [e for e in d["traceEvents"] if e.get("ph") == "X" and e["cat"] == "op"]
C, B, T = 32, 2, 16
rows = B * T * C * 4  # the [N, C] float activation every TP row exchange moves in all
for rank in (0, 1):
    for name in ("allgather", "reduce_scatter"):
        mine = [o for o in ops if o["pid"] == rank and o["name"] == name]
        assert mine, f"rank {rank}: no {name} events"
        tp = [o for o in mine if o["args"].get("group") == "tp"]
        assert tp, f"rank {rank}: no {name} on the tp group: {[o['args'] for o in mine[:3]]}"
        assert any(o["args"].get("bytes") == rows for o in tp), \
            f"rank {rank}: no {name} of {rows} bytes: {sorted({o['args'].get('bytes') for o in tp})}"
print(f"ok: {len(ops)} op events on 2 TP ranks")
PY
  ;;
*)
  echo "unknown mode $MODE"; exit 2 ;;
esac
echo PASS
