#!/usr/bin/env bash
# A full disk and a read-only disk while a checkpoint is written, through
# `fivefold train` on one rank and on DP2 under mpirun. The save fails with
# a message naming the path and the error, the run stops with a non-zero
# status, no partial checkpoint is left, and the previous checkpoint stays
# the newest: a run resumes from it. Needs root and mount (a tmpfs with
# size=, a read-only bind mount); without them it reports SKIP (77).
# usage: disk_test.sh FIVEFOLD MPIEXEC MODE   (MODE: full | readonly)
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
work_dir "disk-$MODE"
MOUNTS=()
unmount_all() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount "${MOUNTS[$i]}" 2>/dev/null; done
  cleanup
}
trap unmount_all EXIT
make_corpus 120
dense_json model.json 2
run_json run-dense.json model.json steps=6 interval=1

mnt=$WORK/mnt
mkdir -p "$mnt"
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=64m tmpfs "$mnt" 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs here (needs root and mount)"
  exit 77
fi
MOUNTS+=("$mnt")

# newest RUN: the step of the newest checkpoint directory.
newest() { ls "$1/checkpoints" | grep '^step-' | sort | tail -1 | sed 's/step-0*//'; }

# resumes_from RUN STEP: a copy of RUN on the ordinary disk resumes from STEP
# and finishes.
resumes_from() {
  rm -rf "resume-$2"
  cp -r "$1" "resume-$2"
  "$FIVEFOLD" train --config run-dense.json --out "resume-$2" --resume --no-progress >"resume-$2.log" 2>&1 ||
    { tail -5 "resume-$2.log"; fail "resuming $1 failed"; return; }
  grep -q "resumed  from .*step-0*$2 " "resume-$2.log" || fail "$1 did not resume from step $2"
}

# fails_saving NP RUN TEXT [flags]: training into RUN stops non-zero with a
# checkpoint error holding TEXT and the checkpoint's path, leaving no partial
# checkpoint behind.
fails_saving() {
  local np=$1 run=$2 text=$3 launch=()
  shift 3
  [ "$np" -gt 0 ] && launch=("$MPIEXEC" -np "$np" --oversubscribe)
  if "${launch[@]}" "$FIVEFOLD" train --config run-dense.json --out "$run" --no-progress "$@" >"$run.log" 2>&1; then
    fail "$run: training on a $MODE disk exited 0"
  fi
  grep "$text" "$run.log" | grep "$run/checkpoints/" ||
    { tail -5 "$run.log"; fail "$run: no message naming the checkpoint path and '$text'"; }
  ls -a "$run/checkpoints" | grep -q '^\.tmp-step' && fail "$run: a partial checkpoint was left behind"
}

case $MODE in
  full)
    # One checkpoint's size on an ordinary disk sizes a tmpfs that holds two
    # and a half: the third save runs out of space.
    train 0 probe dense --steps 1 || exit 1
    bytes=$(du -sb "$(ckpt probe 1)" | cut -f1)
    for np in 0 2; do
      full=$mnt/full$np
      mkdir -p "$full"
      mount -t tmpfs -o size=$((bytes * 5 / 2 + 65536)) tmpfs "$full" || { fail "mounting the small tmpfs"; continue; }
      MOUNTS+=("$full")
      fails_saving "$np" "$full/run" "ENOSPC: No space left on device"
      [ "$(newest "$full/run")" = 2 ] || fail "np $np: the newest checkpoint is step $(newest "$full/run"), expected 2"
      resumes_from "$full/run" 2
    done
    ;;
  readonly)
    # Three steps saved, then the checkpoints made read-only (a read-only
    # bind mount: root ignores permission bits); the resumed run's save of
    # step 4 fails.
    for np in 0 2; do
      run=$mnt/ro$np
      train 0 "$run" dense --steps 3 || continue
      mount --bind "$run/checkpoints" "$run/checkpoints" && MOUNTS+=("$run/checkpoints") &&
        mount -o remount,ro,bind "$run/checkpoints" || { echo "SKIP: cannot make a read-only bind mount"; exit 77; }
      fails_saving "$np" "$run" "EROFS: Read-only file system" --resume
      umount "$run/checkpoints"
      [ "$(newest "$run")" = 3 ] || fail "np $np: the newest checkpoint is step $(newest "$run"), expected 3"
      resumes_from "$run" 3
    done
    ;;
  *)
    echo "disk_test.sh: unknown mode $MODE" >&2
    exit 2
    ;;
esac
finish disk
