#!/usr/bin/python3
"""Compares two fivefold runs for the data-parallel golden-rule tests.

usage: compare_runs.py losses RUN_A RUN_B RTOL [ATOL]
         the per-step train records of RUN_A/metrics.jsonl and RUN_B's:
         every step of RUN_A is in RUN_B (a resumed run logs only its own);
         loss, lm, aux, z and grad_norm each within |a - b| <= RTOL * |b| +
         ATOL (ATOL, default 1e-7, is only a floor for values that are zero
         up to rounding: a z loss of 1e-3 is held to RTOL relative like any
         other); lr equal; a value that is not finite is a mismatch
       compare_runs.py values RUN_A RUN_B KEYS RTOL
         as losses, for the comma-separated KEYS of the train records only
         (a bf16 run against an fp32 one: the loss and the norm, not an
         accuracy that moves in steps of one image)
       compare_runs.py tensors FILE_A FILE_B RTOL ATOL
         two safetensors files: the same tensor names and shapes, and every
         element within ATOL + RTOL * |b| (and finite)
Prints the largest differences found; exits 1 on a mismatch."""
import json
import math
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        raw = data[8 + n + lo : 8 + n + hi]
        out[name] = np.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def train_records(run):
    recs = {}
    with open(run + "/metrics.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "train":
                recs[r["step"]] = r
    return recs


LOSS_ATOL = 1e-7


def compare_losses(a, b, rtol, atol=LOSS_ATOL, only=None):
    ra, rb = train_records(a), train_records(b)
    if not ra or not set(ra) <= set(rb):
        print(f"steps differ: {sorted(ra)} vs {sorted(rb)}")
        return 1
    worst = (0.0, None)  # largest |a - b| / (RTOL |b| + ATOL): above 1 is a mismatch
    bad = 0
    for step in sorted(ra):
        # The network's metrics by name (lm, aux, z for the transformer;
        # accuracy for the MLP), the norm and the learning rate.
        keys = [k for k in only or ("loss", "lm", "aux", "z", "accuracy", "grad_norm", "lr") if k in ra[step]]
        if only and len(keys) < len(only):
            print(f"MISMATCH step {step}: {a} has no {', '.join(k for k in only if k not in keys)}")
            bad += 1
        for key in keys:
            x, y = float(ra[step][key]), float(rb[step][key])
            if not (math.isfinite(x) and math.isfinite(y)):  # NaN compares false: it would pass every bound
                print(f"MISMATCH step {step} {key}: {x!r} vs {y!r} (not finite)")
                bad += 1
                continue
            if key == "lr":  # the same schedule on every layout: no rounding to allow for
                if x != y:
                    print(f"MISMATCH step {step} lr: {x!r} vs {y!r} (must be equal)")
                    bad += 1
                continue
            allowed = rtol * abs(y) + atol
            ratio = abs(x - y) / allowed if allowed else (0.0 if x == y else float("inf"))  # 0 0: bit for bit
            rel = abs(x - y) / abs(y) if y else (0.0 if x == y else float("inf"))
            if ratio > worst[0]:
                worst = (ratio, f"step {step} {key}: {x!r} vs {y!r}, relative {rel:.3g}")
            if ratio > 1:
                print(f"MISMATCH step {step} {key}: {x!r} vs {y!r} (|diff| {abs(x - y):.3g} > "
                      f"{rtol} * |b| + {atol} = {allowed:.3g}; relative {rel:.3g})")
                bad += 1
    print(f"losses: {len(ra)} steps within {rtol} relative + {atol} absolute; closest to the limit at "
          f"{worst[0]:.3g} of it ({worst[1]})")
    return 1 if bad else 0


def compare_tensors(fa, fb, rtol, atol):
    ta, tb = read_safetensors(fa), read_safetensors(fb)
    if sorted(ta) != sorted(tb):
        print(f"tensor names differ: {sorted(set(ta) ^ set(tb))}")
        return 1
    bad = 0
    worst = (0.0, None)
    for name in sorted(ta):
        x, y = ta[name].astype(np.float64), tb[name].astype(np.float64)
        if x.shape != y.shape:
            print(f"MISMATCH {name}: shape {x.shape} vs {y.shape}")
            bad += 1
            continue
        if not (np.isfinite(x).all() and np.isfinite(y).all()):  # NaN compares false: it would pass
            print(f"MISMATCH {name}: {int((~np.isfinite(x)).sum())} and {int((~np.isfinite(y)).sum())} "
                  "elements are not finite")
            bad += 1
            continue
        excess = np.abs(x - y) - (atol + rtol * np.abs(y))
        i = int(np.argmax(excess)) if excess.size else 0
        if excess.size and np.abs(x - y).max() > worst[0]:
            worst = (float(np.abs(x - y).max()), name)
        if excess.size and excess.flat[i] > 0:
            print(f"MISMATCH {name}[{i}]: {x.flat[i]!r} vs {y.flat[i]!r}")
            bad += 1
    print(f"tensors: {len(ta)} compared, largest absolute difference {worst[0]:.3g} ({worst[1]})")
    return 1 if bad else 0


def main():
    if len(sys.argv) in (5, 6) and sys.argv[1] == "losses":
        atol = float(sys.argv[5]) if len(sys.argv) == 6 else LOSS_ATOL
        return compare_losses(sys.argv[2], sys.argv[3], float(sys.argv[4]), atol)
    if len(sys.argv) == 6 and sys.argv[1] == "values":
        return compare_losses(sys.argv[2], sys.argv[3], float(sys.argv[5]), only=sys.argv[4].split(","))
    if len(sys.argv) >= 6 and sys.argv[1] == "tensors":
        return compare_tensors(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
