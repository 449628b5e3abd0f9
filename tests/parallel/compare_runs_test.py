#!/usr/bin/python3
"""Self-test of compare_runs.py's loss rule (ctest parallel.compare_rule):
|a - b| <= RTOL * |b| + ATOL with a floor far below the losses compared, so
that small losses (an aux or z loss of 1e-2, 1e-3) are held to RTOL
relative like the others and not to an absolute 1e-4. Synthetic
metrics.jsonl files, no MPI: each case says whether the pair must match;
the `values` form compares only the keys it names."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = {"loss": 3.2, "lm": 3.1, "aux": 0.0105, "z": 0.00123, "grad_norm": 0.87, "lr": 0.001}


def run_dir(root, name, changes):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for step in (1, 2, 3):
            rec = dict(BASE, type="train", step=step)
            if step == 2:
                rec.update(changes)
            f.write(json.dumps(rec) + "\n")
    return d


CASES = [  # (what, changes in RUN_A at step 2, RTOL, must match)
    ("identical runs", {}, 1e-4, True),
    ("loss 5e-5 relative off under 1e-4", {"loss": 3.2 * (1 + 5e-5)}, 1e-4, True),
    ("loss 2e-4 relative off under 1e-4", {"loss": 3.2 * (1 + 2e-4)}, 1e-4, False),
    ("z loss 1e-2 relative off (1.2e-5 absolute) under 1e-4", {"z": 0.00123 * 1.01}, 1e-4, False),
    ("aux loss 1e-3 relative off under 1e-4", {"aux": 0.0105 * 1.001}, 1e-4, False),
    ("z loss 5e-5 relative off under 1e-4", {"z": 0.00123 * (1 + 5e-5)}, 1e-4, True),
    ("aux loss 2e-5 relative off under 1e-5", {"aux": 0.0105 * (1 + 2e-5)}, 1e-5, False),
    ("zero z loss against 5e-8 (the floor)", {"z": 5e-8}, 1e-4, True),
    ("lr differs", {"lr": 0.0010000001}, 1e-4, False),
    ("loss NaN (compares false, so no bound catches it)", {"loss": float("nan")}, 1e-4, False),
    ("grad norm infinite", {"grad_norm": float("inf")}, 1e-4, False),
]

# `values` compares only the keys named (a bf16 run against an fp32 one:
# loss and norm, not an accuracy that moves by whole images).
VALUE_CASES = [  # (what, changes in RUN_A at step 2, keys, RTOL, must match)
    ("accuracy off, not named", {"accuracy": 0.5}, "loss,grad_norm", 1e-4, True),
    ("accuracy off, named", {"accuracy": 0.5}, "loss,accuracy", 1e-4, False),
    ("grad norm 3e-2 relative off under 5e-2", {"grad_norm": 0.87 * 1.03}, "loss,grad_norm", 5e-2, True),
    ("grad norm 6e-2 relative off under 5e-2", {"grad_norm": 0.87 * 1.06}, "loss,grad_norm", 5e-2, False),
    ("a named key the run lacks", {}, "loss,psnr", 1e-4, False),
]


def check(what, args, must_match):
    """Runs compare_runs.py with args; 1 when the verdict is not the one expected."""
    r = subprocess.run([sys.executable, os.path.join(HERE, "compare_runs.py")] + args, capture_output=True, text=True)
    matched = r.returncode == 0
    ok = matched == must_match
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {'matched' if matched else 'mismatch'} "
          f"(expected {'match' if must_match else 'mismatch'})")
    if not ok:
        print(r.stdout + r.stderr)
    return 0 if ok else 1


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        ref = run_dir(root, "ref", {})
        zero_ref = run_dir(root, "zero_ref", {"z": 0.0})
        for i, (what, changes, rtol, must_match) in enumerate(CASES):
            a = run_dir(root, f"case{i}", changes)
            b = zero_ref if "zero z" in what else ref
            failures += check(what, ["losses", a, b, str(rtol)], must_match)
        with_accuracy = run_dir(root, "value_ref", {"accuracy": 0.25})
        for i, (what, changes, keys, rtol, must_match) in enumerate(VALUE_CASES):
            a = run_dir(root, f"value{i}", {"accuracy": 0.25, **changes})
            failures += check(f"values {keys}, {what}", ["values", a, with_accuracy, keys, str(rtol)], must_match)
    print("compare_runs rule: " + ("all cases as expected" if not failures else f"{failures} case(s) wrong"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
