#!/usr/bin/env bash
# Stage replication (parallel.stage_widths, docs/planner.md "Stage
# replication") through `fivefold train` under mpirun, against one rank:
# the stages' replicas split every micro-batch's sequences, activations and
# gradients cross between them in pieces, each stage sums its gradients over
# its own replicas. Tiny dense model (4 blocks, hidden 32, untied), 2
# sequences of 16 tokens per micro-batch, 4 micro-batches, 5 steps.
#
# usage: stagerep_test.sh FIVEFOLD MPIEXEC MODE
#   golden  widths 2,1 (traced: the trace has the replicated program) and 1,2 on 3 ranks and 2,2 on 4 ranks (1F1B), 2,1
#           under GPipe, 2,2 with the distributed optimizer (ZeRO-1 over each
#           stage's replicas, several buckets), tied embeddings under 2,1 and
#           1,2 against a tied one-rank run: losses (gradient clipping is
#           on, so the norm counts), final model and optimizer within 1e-4 of
#           one rank, validation included
#   resume  a 2,1 checkpoint at step 3 resumed by one rank, and a one-rank
#           checkpoint resumed under 1,2, end where one rank ends; the
#           planner's replicated plan (--replicate-stages on 3 devices: widths
#           2,1, ZeRO-1) trains under `train --plan` like one rank, its
#           --explain says what replication bought
#   config  widths that do not fit the job, the micro-batch, tp, dp, tied
#           embeddings with the distributed optimizer, the zb-h1 and interleaved orders and warm-up depths
#           (in the file and as flags), one rank, more stages than the
#           replicated program holds, and a non-transformer model are refused with the file or field and the reason
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir stagerep-test

make_corpus
dense_json dense.json 4
dense_json tied.json 4 tied
run_json run-dense.json dense.json eval_interval=5
run_json run-tied.json tied.json

case "$MODE" in
  golden)
    train 0 one dense --grad-accum 4 || exit 1
    train 3 w21 dense --grad-accum 4 --stage-widths 2,1 --trace w21.trace.json && same w21 one 5
    # The trace shows the replicated program: a process per rank, both
    # first-stage replicas sending their pieces of every micro-batch to rank 2.
    $PY - w21.trace.json <<'PYEOF' || fail "the 2,1 trace does not show the replicated program"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
assert {e.get("pid") for e in ev if e.get("ph") == "X"} >= {0, 1, 2}
for r in (0, 1):
    sends = [e for e in ev if e.get("cat") == "SEND_ACT" and e.get("pid") == r and e["args"].get("iter") == 0]
    assert len(sends) == 4 and all(e["args"]["peer"] == 2 for e in sends), (r, sends)
PYEOF
    train 3 w12 dense --grad-accum 4 --stage-widths 1,2 && same w12 one 5
    train 4 w22 dense --grad-accum 4 --stage-widths 2,2 && same w22 one 5
    train 3 w21-gpipe dense --grad-accum 4 --stage-widths 2,1 --schedule gpipe && same w21-gpipe one 5
    train 4 w22-zero dense --grad-accum 4 --stage-widths 2,2 --distributed-optimizer --bucket-mb 0.004 &&
      same w22-zero one 5
    # Tied embeddings: the first stage's embed.weight and the last stage's
    # head copy sum both ends' gradients, whichever end is wider.
    train 0 one-tied tied --grad-accum 4 || exit 1
    train 3 w21-tied tied --grad-accum 4 --stage-widths 2,1 && same w21-tied one-tied 5
    train 3 w12-tied tied --grad-accum 4 --stage-widths 1,2 && same w12-tied one-tied 5
    grep -q "val loss" w21.log || fail "w21 did not evaluate"
    [ "$(grep -o 'val loss [0-9.]*' w21.log | tail -1)" = "$(grep -o 'val loss [0-9.]*' one.log | tail -1)" ] ||
      fail "w21's validation loss differs from one rank's"
    one_printer w22
    grep -q "stages   replicated: widths 2,2" w22.log || fail "the banner does not show the stage widths"
    ;;
  resume)
    train 0 one dense --grad-accum 4 || exit 1
    train 3 w21 dense --grad-accum 4 --stage-widths 2,1 || exit 1
    mkdir -p from-w21/checkpoints && cp -r "$(ckpt w21 3)" from-w21/checkpoints/
    train 0 from-w21 dense --grad-accum 4 --resume && same from-w21 one 5
    mkdir -p from-one/checkpoints && cp -r "$(ckpt one 3)" from-one/checkpoints/
    train 3 from-one dense --grad-accum 4 --stage-widths 1,2 --resume && same from-one one 5
    # The planner's own replicated plan: on 3 devices (DP3 cannot split the
    # batch) it picks widths 2,1, says in --explain what they bought, and
    # the simulate line it prints for them runs.
    "$FIVEFOLD" plan --model dense.json --cluster dgx-h100 --gpus 3 --seq 16 --global-batch 8 --mbs-list 2 --top 1 \
      --replicate-stages --explain --out plan.json >plan.log 2>&1 || { cat plan.log; fail "plan"; }
    grep -Eq '"stage_widths":[[:space:]]*\[2, 1\]' plan.json || { cat plan.log; fail "the plan is not replicated 2,1"; }
    grep -q "stage replication bought [0-9.]*% .* with widths 2,1" plan.log || fail "plan --explain does not say what replication bought"
    simline=$(sed -n 's/^simulate the best: fivefold //p' plan.log)
    # shellcheck disable=SC2086
    "$FIVEFOLD" $simline --quiet >sim.log 2>&1 && grep -q "predicted: step" sim.log || { cat sim.log; fail "the printed simulate line"; }
    train 3 planned dense --plan plan.json && same planned one 5
    grep -Eq '"stage_widths":[[:space:]]*\[2, 1\]' planned/config.json || fail "the plan's widths are not in the run's config.json"
    ;;
  config)
    refused 2 dense "needs 3 ranks but the job has 2" --stage-widths 2,1
    refused 3 dense "does not divide training.micro_batch_size 3" --stage-widths 2,1 --micro-batch-size 3
    refused 3 dense "parallel.tp, cp, ep, etp and vpp must be 1" --stage-widths 2,1 --tp 2
    refused 3 dense "parallel.dp 2 with parallel.stage_widths" --stage-widths 2,1 --dp 2
    refused 3 dense "parallel.pp is 3 but parallel.stage_widths" --stage-widths 2,1 --pp 3
    refused 3 tied "tied embeddings (model.tie_word_embeddings) over replicated stages run without the distributed optimizer" \
      --stage-widths 2,1 --distributed-optimizer
    refused 3 dense "replica count >= 1" --stage-widths 3,0
    # Orders the replicated program does not expand (the planner's
    # replicated plans never carry them), one rank, and a model that is not
    # a pipeline of blocks: each refused naming the file or the field, the
    # widths and the reason. These checks come before the world's size, so
    # one process shows them (without an MPI abort that may lose output).
    $PY - "$(dirname "$0")/../../configs/mlp-synthetic.json" <<'PYEOF' || fail "writing the run configs"
import json, sys
c = json.load(open("run-dense.json"))
c["parallel"] = {"stage_widths": [2, 1], "schedule": "zb-h1"}
json.dump(c, open("run-zb.json", "w"))
m = json.load(open(sys.argv[1]))
m["training"].update({"steps": 2, "log_interval": 1, "eval_interval": 0})
json.dump(m, open("run-mlp.json", "w"))
PYEOF
    t() { "$FIVEFOLD" train --config "run-$1.json" --out bad --no-progress "${@:2}"; }
    expect 2 'run-zb.json: parallel.schedule "zb-h1" with parallel.stage_widths [2, 1]: a replicated pipeline runs the gpipe or 1f1b order (no split backward over replicas)' -- t zb
    expect 2 'run-dense.json: parallel.schedule "zb-h1" with parallel.stage_widths [1, 2]' -- t dense --stage-widths 1,2 --schedule zb-h1
    expect 2 "run-dense.json: parallel.warmup with parallel.stage_widths [2, 1]: a replicated pipeline runs its schedule's own warm-up" \
      "leave parallel.warmup out" -- t dense --stage-widths 2,1 --warmup 1,0
    expect 2 "parallel.warmup with parallel.stage_widths [2, 1]" -- t dense --stage-widths 2,1 --schedule 1f1b --warmup 2,0
    expect 2 'parallel.schedule "interleaved" with parallel.stage_widths [2, 1]' "one model chunk per rank" -- \
      t dense --stage-widths 2,1 --schedule interleaved
    expect 2 "run-dense.json: parallel.stage_widths [1] is one rank: leave the field out" -- t dense --stage-widths 1
    expect 2 "run-mlp.json: parallel.stage_widths [2, 1]: stage replication runs transformer models only" -- \
      t mlp --stage-widths 2,1
    many=$($PY -c 'print(",".join(["1"] * 65))')
    expect 2 "run-dense.json: parallel.stage_widths lists 65 stages; a replicated pipeline has at most 64" -- \
      t dense --stage-widths "$many"
    ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
finish stagerep_test
