#!/usr/bin/env bash
# The planner's best plans are plans the runtime runs. On the local spec
# (`fivefold calibrate --quick` on 2 ranks), `fivefold plan` for three tiny
# models (MoE with 8 and 4 experts, dense with tied embeddings) and the
# demo's model on 2 ranks writes its best plan, and `fivefold train --plan`
# trains each for 2 steps with the plan's gradient bucket size (its
# config.json and banner). A plan made with --runtime any and selective
# recomputation of the attention core is refused by train, and the
# default (--runtime fivefold) never emits one; one with selective
# recomputation of layernorm,mlp trains recomputing them; one with full
# recomputation trains
# recomputing; a plan made for another model (same layer counts) is
# refused naming both.
# usage: plan_train_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=plan-train
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir plan-train

make_corpus
moe_json moe8.json 4 8
moe_json moe4.json 2 4 64
dense_json dense.json 4 tied
"$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" calibrate --quick --out spec.json >calibrate.log 2>&1 ||
  { cat calibrate.log; echo "FAIL: calibrate"; exit 1; }

# The demo's model (configs/demo-moe.json: 4 layers, hidden 192, 8 experts, vocabulary 4096).
$PY -c 'import json, sys; json.dump(json.load(open(sys.argv[1]))["model"], open("demo.json", "w"))' \
  "$(dirname "$0")/../../configs/demo-moe.json"
for model in moe8 moe4 dense demo; do
  run_json "run-$model.json" "$model.json" steps=2 interval=0 global_batch_size=8 micro_batch_size=-
  # Every micro-batch size and recomputation option is offered; only what runs may win.
  if ! "$FIVEFOLD" plan --model "$model.json" --cluster spec.json --gpus 2 --seq 16 --global-batch 8 --dtype fp32 \
    --top 5 --mbs-list 1,2,4 --recompute-list none,selective,full --out "plan-$model.json" >"plan-$model.log" 2>&1; then
    cat "plan-$model.log"
    fail "plan for $model"
    continue
  fi
  layout=$($PY -c 'import json, sys; p = json.load(open(sys.argv[1]))["parallel"]; print(" ".join(f"{k}={v}" for k, v in p.items()))' "plan-$model.json")
  echo "$model: $layout"
  case " $layout " in *" recompute=selective "*) fail "$model: the plan recomputes selectively";; esac
  grep -q 'selective' "plan-$model.log" && fail "$model: the table ranks selective recomputation"
  train 2 "planned-$model" "$model" --plan "plan-$model.json" || continue
  [ "$(grep -c '^step ' "planned-$model.log")" -eq 2 ] || fail "planned-$model: expected 2 step lines"
  # The bucket search's size is what the run used (its config.json), and
  # with data parallelism the banner shows that size's buckets.
  $PY - "plan-$model.json" "planned-$model/config.json" "planned-$model.log" <<'PYEOF' || fail "$model: the plan's buckets were not applied"
import json, re, sys
plan = json.load(open(sys.argv[1]))
par = plan["parallel"]
if par["dp"] * par["cp"] > 1 or par["edp"] > 1:
    mb = plan["buckets"]["bucket_mb"]
    used = json.load(open(sys.argv[2]))["parallel"]["bucket_mb"]
    assert abs(used - mb) <= 1e-6 * mb, (used, mb)
    line = re.search(r"(\d+) gradient bucket\(s\) of <= ([0-9.]+) MB", open(sys.argv[3]).read())
    assert line, "no bucket line in the banner"
    print(f"buckets: plan {mb:.4g} MB, {plan['buckets']['buckets_per_stage']} per stage; run: {line.group(1)} of <= {line.group(2)} MB")
    assert float(line.group(2)) <= mb * (1 + 1e-3) + 0.01
else:
    assert "buckets" not in plan, "a plan without a reduction has no bucket choice"
PYEOF
done

# A plan is for one model: another with the same layer and expert counts
# (hidden 64 instead of 32) is refused with both models named, and so is
# a plan without the model's identity.
moe_json moe8-wide.json 4 8 64
run_json run-moe8-wide.json moe8-wide.json steps=2 interval=0 global_batch_size=8 micro_batch_size=-
refused 2 moe8-wide "made for model moe8.json (4 layers, hidden 32" --plan plan-moe8.json
grep -q "moe8-wide.json (4 layers, hidden 64" bad.log || { cat bad.log; fail "the message does not name the run's model"; }
$PY -c 'import json, sys; p = json.load(open(sys.argv[1])); del p["model_identity"]; json.dump(p, open(sys.argv[2], "w"))' \
  plan-moe8.json plan-anonymous.json
refused 2 moe8 "has no model_identity" --plan plan-anonymous.json

# Planned for another runtime, selective recomputation of the attention
# core is refused by train with a message.
"$FIVEFOLD" plan --model moe8.json --cluster spec.json --gpus 2 --seq 16 --global-batch 8 --dtype fp32 \
  --recompute-list selective --runtime any --out plan-sel.json >plan-sel.log 2>&1 || fail "plan --runtime any"
refused 2 moe8 'field "parallel.recompute_modules": the plan recomputes core_attn selectively' --plan plan-sel.json
# Selective recomputation of the modules fivefold runs is planned for it and trains.
"$FIVEFOLD" plan --model moe8.json --cluster spec.json --gpus 2 --seq 16 --global-batch 8 --dtype fp32 \
  --recompute-list selective --recompute-modules layernorm,mlp,moe_act --out plan-selmods.json >plan-selmods.log 2>&1 ||
  fail "plan --recompute-list selective --recompute-modules layernorm,mlp,moe_act"
grep -q '"recompute_modules":[[:space:]]*"layernorm,mlp,moe_act"' plan-selmods.json ||
  fail "the plan does not carry its recompute_modules"
# simulate --plan prices the plan's modules, not the default.
"$FIVEFOLD" simulate --plan plan-selmods.json --cluster spec.json 2>&1 | grep -q "recompute selective (layernorm,mlp,moe_act)" ||
  fail "simulate --plan does not price the plan's recompute_modules"
train 2 sel-run moe8 --plan plan-selmods.json && grep -q "recompute selective layernorm,mlp,moe_act" sel-run.log ||
  fail "a plan with selective recomputation did not train recomputing its modules"
# For fivefold, selective recomputation alone leaves nothing to plan.
if "$FIVEFOLD" plan --model moe8.json --cluster spec.json --gpus 2 --seq 16 --global-batch 8 --dtype fp32 \
  --recompute-list selective >plan-none.log 2>&1; then
  fail "plan with --recompute-list selective found a configuration fivefold runs"
fi
grep -q "not run by the runtime" plan-sel.log || fail "the table does not count what the runtime does not run"
# Full recomputation is planned for fivefold and trains.
"$FIVEFOLD" plan --model moe8.json --cluster spec.json --gpus 2 --seq 16 --global-batch 8 --dtype fp32 \
  --recompute-list full --out plan-full.json >plan-full.log 2>&1 || fail "plan --recompute-list full"
train 2 full-run moe8 --plan plan-full.json && grep -q "recompute full" full-run.log ||
  fail "a plan with full recomputation did not train recomputing"
finish plan_train_test
