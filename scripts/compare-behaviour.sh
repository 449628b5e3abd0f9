#!/usr/bin/env bash
# Proof that a change of the code leaves training unchanged: trains the demo
# config (configs/demo-moe.json, short) in one process and in the folded
# 4-rank layout of `make demo` (attention TP2 x DP2, MoE EP4) with a BEFORE
# and an AFTER build of fivefold, into the same output path (the run config
# recorded in a checkpoint names it), and requires
#   * the same losses in metrics.jsonl (every step: loss, lm, aux, z, lr,
#     grad_norm, val_loss, moe_imbalance; timing fields are ignored), and
#   * byte-identical final checkpoints (model.safetensors,
#     optimizer.safetensors, state.json).
# Usage: scripts/compare-behaviour.sh BEFORE/fivefold AFTER/fivefold [STEPS]
# (STEPS defaults to 20). Needs the BPE corpus (scripts/prepare-corpus.sh)
# and mpirun. Exits 0 when both cases match, 1 otherwise.
set -u
cd "$(dirname "$0")/.." || exit 2
if [ $# -lt 2 ]; then
  echo "usage: $0 BEFORE/fivefold AFTER/fivefold [STEPS]" >&2
  exit 2
fi
BEFORE=$(realpath "$1") AFTER=$(realpath "$2") STEPS=${3:-20}
CONFIG=configs/demo-moe.json
if [ ! -s data/cache/kjv-bpe4096/train.bin ]; then
  echo "compare-behaviour: no corpus; run scripts/prepare-corpus.sh first" >&2
  exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-compare-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RUN=$WORK/run
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE

train() { # BINARY CASE
  local bin=$1 case=$2
  rm -rf "$RUN"
  local common=(train --config "$CONFIG" --out "$RUN" --steps "$STEPS" --log-interval 1 --no-progress)
  if [ "$case" = demo-1rank ]; then
    OMP_NUM_THREADS=2 "$bin" "${common[@]}" --threads 2
  else
    OMP_NUM_THREADS=1 mpirun -np 4 --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY \
      "$bin" "${common[@]}" --tp 2 --ep 4 --micro-batch-size 8 --global-batch-size 16 --threads 1
  fi
}

losses() { # METRICS.JSONL -> the deterministic fields, one record a line
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
keep = ("type", "step", "loss", "lm", "aux", "z", "lr", "grad_norm", "val_loss", "moe_imbalance",
        "first_loss", "final_loss", "first_val_loss", "final_val_loss", "tokens")
for line in open(sys.argv[1]):
    rec = json.loads(line)
    if rec.get("type") == "checkpoint":
        continue
    print(json.dumps({k: rec[k] for k in keep if k in rec}, sort_keys=True))
PY
}

status=0
for case in demo-1rank folded-4rank; do
  for side in before after; do
    bin=$BEFORE
    [ $side = after ] && bin=$AFTER
    if ! train "$bin" $case > "$WORK/$case-$side.log" 2>&1; then
      echo "compare-behaviour: $case: the $side run failed:"; tail -5 "$WORK/$case-$side.log"
      exit 1
    fi
    mv "$RUN" "$WORK/$case-$side"
  done
  b=$WORK/$case-before a=$WORK/$case-after
  if diff <(losses "$b/metrics.jsonl") <(losses "$a/metrics.jsonl") > "$WORK/diff"; then
    echo "$case: losses identical ($(losses "$a/metrics.jsonl" | grep -c '"train"') train records," \
         "final $(losses "$a/metrics.jsonl" | grep '"summary"')"
  else
    echo "$case: LOSSES DIFFER:"; head -10 "$WORK/diff"; status=1
  fi
  cb=$(ls -d "$b"/checkpoints/step-* | tail -1) ca=$(ls -d "$a"/checkpoints/step-* | tail -1)
  for f in model.safetensors optimizer.safetensors state.json; do
    if [ "$(basename "$cb")" = "$(basename "$ca")" ] && cmp -s "$cb/$f" "$ca/$f"; then
      echo "$case: $(basename "$ca")/$f byte-identical ($(stat -c %s "$ca/$f") bytes, sha256 $(sha256sum < "$ca/$f" | cut -c1-16))"
    else
      echo "$case: $(basename "$ca")/$f DIFFERS"; status=1
    fi
  done
done
[ $status = 0 ] && echo "compare-behaviour: before and after train identically"
exit $status
