#!/usr/bin/env bash
# Driver of the PyTorch reference tests (registered by tests.cmake).
#
#   run_compare.sh MODEL_DUMP CONFIG [compare.py flags...]
#       runs fivefold's model (tests/tools/model_dump) on CONFIG for 10 optimizer
#       steps and checks everything it wrote against the PyTorch reference.
#   run_compare.sh --self-check CONFIG TENSOR
#       proves the comparison can fail: a dump made by the reference itself
#       with TENSOR perturbed by 1e-3 of its scale must be reported as a
#       mismatch (exit 1 from compare.py), and nothing else counts.
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
  "$python" "$here/compare.py" --config "$config" --dir "$tmp"
  rc=$?
  set -e
  [ "$rc" -eq 77 ] && exit 77
  if [ "$rc" -ne 1 ]; then
    echo "self-check: compare.py exited $rc, expected 1 (a mismatch in $tensor)" >&2
    exit 1
  fi
  echo "self-check: the perturbed $tensor was caught, as it should be"
  exit 0
fi

tool="$1" config="$2"
shift 2
"$tool" --config "$config" --out "$tmp" --steps 10 --seed 1234 --batch 2 --seq 16
"$python" "$here/compare.py" --config "$config" --dir "$tmp" "$@"
