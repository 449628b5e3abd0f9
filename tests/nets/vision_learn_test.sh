#!/usr/bin/env bash
# Learning: the paper's small conv network with ReLUs
# (configs/vision/tcnn-small-conv-relu.json, shortened to 300 steps of 32
# images on 4,000 training images) reaches at least 60% accuracy on 1,000
# held-out validation images, where chance is 10%. Prints the accuracy.
# Usage: vision_learn_test.sh path/to/fivefold path/to/configs/vision
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
CONFIG=$2/tcnn-small-conv-relu.json
MODE=learn
. "$(dirname "$0")/../parallel/lib.sh"
work_dir vision-learn
$PY - "$CONFIG" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"].update({"max_train_images": 4000, "max_val_images": 1000, "max_test_images": 1000})
c["training"].update({"micro_batch_size": 32, "steps": 300, "warmup_steps": 20, "log_interval": 100,
                      "eval_interval": 0, "threads": 1, "peak_gflops": 50})
c["checkpoint"] = {"interval": 0, "keep_last": 1}
json.dump(c, open("run-learn.json", "w"))
PYEOF
train 0 learn learn || exit 1
acc=$($PY -c "import json; r=[json.loads(l) for l in open('learn/metrics.jsonl')]
print([x['val_accuracy'] for x in r if x['type'] == 'eval'][-1])")
echo "validation accuracy after 300 steps: $acc (chance 0.1)"
$PY -c "import sys; sys.exit(0 if $acc >= 0.60 else 1)" || fail "validation accuracy $acc, expected >= 0.60"
finish vision_learn_test
