#!/usr/bin/env bash
# Every subcommand parses its options with the one parser of base/options.h:
# for each command, a run with `--flag value` and the same run with
# `--flag=value` must print the same thing and end with the same exit code
# (and not a usage error, exit 2, so the options were understood); an
# unknown option is refused with exit 2 and the common wording, with a
# near-miss hint when one is close; an option without its value says so.
# Usage: options_test.sh path/to/fivefold path/to/source-root
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ROOT=$(cd "$2" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-options-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

MODEL=$ROOT/configs/models/tiny/mixtral.json
CLUSTER=$ROOT/configs/clusters/dgx-h100.json
NOFILE=$WORK/does-not-exist

# both_forms COMMAND... : the arguments with "--flag value" pairs written
# as given, then again with every "--flag value" joined as "--flag=value".
# A value is an argument that follows an option and does not start with "-".
both_forms() {
  local spaced=("$@") joined=() i=0 n=$#
  local args=("$@")
  while [ $i -lt $n ]; do
    local a=${args[$i]}
    if [[ $a == --?* && $a != *=* && $((i + 1)) -lt $n && ${args[$((i + 1))]} != -* ]]; then
      joined+=("$a=${args[$((i + 1))]}"); i=$((i + 2))
    else
      joined+=("$a"); i=$((i + 1))
    fi
  done
  local out1 out2 code1 code2
  out1=$("$FIVEFOLD" "${spaced[@]}" 2>&1); code1=$?
  out2=$("$FIVEFOLD" "${joined[@]}" 2>&1); code2=$?
  if [ "$code1" -eq 2 ]; then fail "'${spaced[*]}' was a usage error: $(tail -2 <<<"$out1")"; return; fi
  [ "$code1" -eq "$code2" ] || fail "'${spaced[*]}' exits $code1, '${joined[*]}' exits $code2"
  # Timings and scratch names may differ between two runs; the rest may not.
  local norm='s/[0-9]+\.[0-9]+ ?(s|ms|us)\b/T/g'
  if [ "$(sed -E "$norm" <<<"$out1")" != "$(sed -E "$norm" <<<"$out2")" ]; then
    fail "'${spaced[*]}' and '${joined[*]}' print different things"
    diff <(echo "$out1") <(echo "$out2") | head -8
  fi
  [ "${#joined[@]}" -lt "${#spaced[@]}" ] || fail "'${spaced[*]}' has no --flag value pair to join"
}

# refused CODE NEEDLE COMMAND...: exit CODE and NEEDLE in the output.
refused() {
  local want=$1 needle=$2; shift 2
  local out code
  out=$("$FIVEFOLD" "$@" 2>&1); code=$?
  [ "$code" -eq "$want" ] || fail "'$*' exits $code, expected $want"
  grep -qF -- "$needle" <<<"$out" || { fail "'$*' lacks \"$needle\""; echo "$out" | head -5; }
}

# --- the same run in both forms, one per command
both_forms train --config "$NOFILE.json" --steps 3 --lr 0.01
both_forms tokenize --byte-level --input "$NOFILE.txt" --out "$WORK/shards" --val-fraction 0.1
both_forms sample --checkpoint "$NOFILE" --prompt x --max-tokens 3 --seed 1
both_forms export --format hf --checkpoint "$NOFILE" --out "$WORK/hf"
both_forms plan --model "$MODEL" --cluster "$CLUSTER" --gpus 8 --seq 128 --global-batch 16 --top 1 --max-pp 2
both_forms simulate --model "$MODEL" --cluster "$CLUSTER" --gpus 8 --seq 128 --global-batch 16 --tp 2 --mbs 1
both_forms calibrate --spec "$CLUSTER" --from-trace "$NOFILE.json" --out "$WORK/spec.json"
both_forms schedule --pp 2 --microbatches 4 --schedule 1f1b
both_forms trace analyze "$NOFILE.json" --iteration 1
both_forms trace compare-ready "$NOFILE.json" --predicted "$NOFILE-pred.json"
both_forms trace compare "$NOFILE.json" --cluster "$CLUSTER" --iteration 0
both_forms trace record --ebpf --from-raw "$NOFILE.txt" --out "$WORK/t.json"
both_forms upcycle --checkpoint "$NOFILE" --out "$WORK/up" --experts 4 --topk 2
both_forms images --out "$WORK/set" --lfw "$NOFILE.npy" --size 16 --seed 2
both_forms blur --input "$NOFILE.png" --out "$WORK/b.png" --seed 2 --kernel-size 9 --noise 0.01
both_forms classify --checkpoint "$NOFILE" --input "$NOFILE.png" --top 2

both_forms import --format hf --model "$NOFILE" --out "$WORK/imported"
both_forms plot "$NOFILE" --out "$WORK/loss.png" --width 400 --height 400

# --- one wording for unknown options and missing values, everywhere
for cmd in train tokenize sample export plan simulate calibrate schedule "trace analyze" "trace compare" \
           "trace compare-ready" "trace record" upcycle blur images import plot classify; do
  # shellcheck disable=SC2086
  refused 2 "unknown option '--no-such-option'" $cmd --no-such-option
  # shellcheck disable=SC2086
  refused 2 "see 'fivefold $cmd --help'" $cmd --no-such-option
done
refused 2 "did you mean '--steps'?" train --config x.json --stpes 3
refused 2 "did you mean '--format'?" export --fromat hf
refused 2 "did you mean '--vocab-size'?" tokenize --vocab-sise 300
refused 2 "did you mean '--microbatches'?" schedule --microbatch 4
refused 2 "did you mean '--iteration'?" trace analyze x.json --iteraton 1
for pair in "train --steps" "tokenize --out" "sample --prompt" "export --out" "plan --model" "simulate --tp" \
            "calibrate --out" "schedule --pp" "trace analyze --dot" "upcycle --experts" \
            "blur --seed" "images --size" "import --model" "plot --out" "classify --top"; do
  # shellcheck disable=SC2086
  refused 2 "${pair##* } needs a value (see 'fivefold ${pair% *} --help')" $pair
done
refused 2 "--no-progress takes no value" train --config x.json --no-progress=1

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "options: every command takes --flag value and --flag=value alike"
