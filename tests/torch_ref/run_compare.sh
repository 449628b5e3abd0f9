#!/usr/bin/env bash
# Driver of the PyTorch reference tests (registered by tests.cmake).
#
#   run_compare.sh MODEL_DUMP CONFIG [compare.py flags...]
#       runs fivefold's model (tests/tools/model_dump) on CONFIG for 10 optimizer
#       steps and checks everything it wrote against the PyTorch reference.
#   run_compare.sh --self-check CONFIG TENSOR
#       proves the comparison can fail, and fails where it should: a dump
#       made by the reference itself with TENSOR perturbed by 1e-3 of its
#       scale must be reported as a mismatch of TENSOR and of nothing else
#       (compare.py --expect-mismatch).
#   run_compare.sh --self-check-honest CONFIG
#       the other half: the same dump unperturbed must pass, so that the
#       perturbed one fails because of the perturbation and not because the
#       reference disagrees with itself.
#
# Exit 77 (ctest's SKIP_RETURN_CODE) when PyTorch is not installed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=/usr/bin/python3   # Debian's python3-torch lives only here
tmp="$(mktemp -d "${TMPDIR:-/tmp}/fivefold-torch-ref.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if [ "${1:-}" = "--self-check" ]; then
  config="$2" tensor="$3"
  "$python" "$here/ref_dump.py" --config "$config" --out "$tmp" --steps 2 --perturb "$tensor" || exit $?
  set +e
  "$python" "$here/compare.py" --config "$config" --dir "$tmp" --expect-mismatch "$tensor"
  rc=$?
  set -e
  [ "$rc" -eq 77 ] && exit 77
  if [ "$rc" -ne 0 ]; then
    echo "self-check: compare.py exited $rc: the perturbed $tensor was not reported as the one mismatch" >&2
    exit 1
  fi
  echo "self-check: the perturbed $tensor, and nothing else, was caught, as it should be"
  exit 0
fi
if [ "${1:-}" = "--self-check-honest" ]; then
  config="$2"
  "$python" "$here/ref_dump.py" --config "$config" --out "$tmp" --steps 2 || exit $?
  set +e
  "$python" "$here/compare.py" --config "$config" --dir "$tmp"
  rc=$?
  set -e
  [ "$rc" -eq 77 ] && exit 77
  if [ "$rc" -ne 0 ]; then
    echo "self-check: compare.py exited $rc on an honest reference dump, expected 0" >&2
    exit 1
  fi
  echo "self-check: the honest reference dump passed, as it should"
  exit 0
fi

tool="$1" config="$2"
shift 2
"$tool" --config "$config" --out "$tmp" --steps 10 --seed 1234 --batch 2 --seq 16
"$python" "$here/compare.py" --config "$config" --dir "$tmp" "$@"
