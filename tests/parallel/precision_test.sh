#!/usr/bin/env bash
# Compute backends and precisions through `fivefold train`, against one
# rank (the golden rule, DESIGN.md), on the tiny models of lib.sh.
#
# usage: precision_test.sh FIVEFOLD MPIEXEC MODE
#   golden-openblas  --gemm-backend openblas: DP2, TP2, PP2, EP2 and CP2
#                    against a one-rank OpenBLAS run with the fp32
#                    tolerances of the other golden tests (1e-4 relative,
#                    1e-5 absolute), and one rank on OpenBLAS against one
#                    rank on oneDNN (the backends agree to fp32 rounding)
#   golden-bf16      --precision bf16: DP2, TP2, PP2 and EP2 against a bf16
#                    one-rank run. Tolerance: per-step losses and grad norm
#                    within 2e-3 relative, final weights and optimizer state
#                    within 2e-3 relative + 1e-3 absolute. Why that much: the
#                    layouts sum in other orders (fp32 differences of ~1e-7),
#                    and a GEMM input on the other side of a bf16 rounding
#                    boundary moves by one bf16 step (2^-8 relative). Losses
#                    then differ by ~1e-4 relative (measured up to 2.4e-4,
#                    TP2); Adam divides each gradient by its own magnitude,
#                    so a weight whose gradient is near zero can move by a
#                    fraction of a step of lr (3e-3) either way (measured up
#                    to 3.4e-4, TP2). A wrong gradient or a missing reduction
#                    is off by O(1) in the losses.
#                    GPT-2 too: the bf16 rank against an fp32 rank (per-step
#                    losses and grad norm within 5e-3 relative, measured
#                    6e-4; final weights finite and within 1e-2 relative +
#                    1.5e-2 absolute, measured 4.4e-3), and TP2 in bf16
#                    against the bf16 rank (losses within 2e-3 as above,
#                    measured 5e-5; weights within 2e-3 relative + 1.5e-2
#                    absolute, measured 4.7e-3). Why 1.5e-2 = 5 steps x lr
#                    for the weights: GPT-2's key bias has no gradient in
#                    exact arithmetic (q . b_k is the same for every key of
#                    a query, and softmax ignores it), so its gradient is
#                    rounding noise, and Adam turns noise into steps of up
#                    to lr either way; the losses hold the rest tightly.
#   resume-bf16      a bf16 run stopped at step 3 and resumed ends bit for
#                    bit where the straight bf16 run ends (losses, model,
#                    optimizer); a bf16 checkpoint continues in fp32 and that
#                    one in bf16 again (the checkpoint format is the same
#                    fp32 master weights)
#   cache-bf16       the bf16 weight cache (kern/bf16_weights.h) changes
#                    nothing: with it on (the default) and off
#                    (FIVEFOLD_BF16_WEIGHT_CACHE=off) a bf16 run gives bit
#                    for bit the same losses, model and optimizer state, on
#                    one rank (dense with a tied head, MoE, GPT-2, a CNN), under
#                    TP2, PP2, DP2 and DP2 with ZeRO-1, and across a resume;
#                    a cache never invalidated after an optimizer step
#                    (FIVEFOLD_TEST_BF16_CACHE_STALE=1) must be caught by the
#                    same comparison; a bad value of the variable is refused
#   nets-bf16        the networks of nets/ in bf16: a small CNN on
#                    Fashion-MNIST (two convolutions, one on a single input
#                    channel, and a dense layer) and the deblurring GAN
#                    (convolutions, transposed convolutions) each differ
#                    from their fp32 run (bf16 ran) and stay near it:
#                    per-step loss and grad norm within 5e-2 relative
#                    (measured up to 1.6e-2 for the CNN's norm and 2.6e-2
#                    for the GAN's, whose first steps move fast; a wrong
#                    pass is off by O(1)); the CNN's weights within 1e-2
#                    relative + 1.5e-2 absolute, as GPT-2's. Accuracy is
#                    not compared: it moves in steps of one image;
#                    the CNN's DP2 run in bf16 matches its one bf16 rank
#                    with golden-bf16's tolerances; the banners say what
#                    bf16 covers there and the weight cache; --gemm-backend
#                    openblas reaches the CNN's dense layer (its banner says so)
#   refuse-bf16      with oneDNN capped to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2),
#                    --precision bf16 stops before training with a message
#                    naming avx512_bf16, for a transformer, a CNN and the
#                    GAN alike; fp32 still trains; bad names for
#                    --precision / --gemm-backend are refused
# golden-bf16, resume-bf16, cache-bf16 and nets-bf16 exit 77 (skipped) on a
# CPU without avx512_bf16.
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir precision-test

make_corpus
dense_json dense.json 4 tied
moe_json moe.json 4 4
gpt2_json gpt2.json 4
for model in dense moe gpt2; do run_json "run-$model.json" "$model.json"; done

# The networks of nets/: a CNN on Fashion-MNIST and the deblurring GAN on
# 16 x 16 LFW faces (made only by the modes that train it).
net_json() { # FILE MODEL DATA
  cat >"$1" <<JSON
{"model": $2, "data": $3,
 "training": {"micro_batch_size": 8, "grad_accum_steps": 2, "steps": 5, "lr": 0.003, "warmup_steps": 1,
              "weight_decay": 0.01, "grad_clip": 1.0, "seed": 3, "log_interval": 1, "eval_interval": 0,
              "threads": 1, "peak_gflops": 50},
 "checkpoint": {"interval": 5, "keep_last": 0}}
JSON
}
net_json run-cnn.json '{"family": "vision", "input": [1, 28, 28], "classes": 10, "layers": [
   {"type": "conv2d", "out_channels": 6, "kernel": 5, "padding": 2}, {"type": "relu"},
   {"type": "maxpool", "kernel": 2}, {"type": "conv2d", "out_channels": 8, "kernel": 5}, {"type": "relu"},
   {"type": "maxpool", "kernel": 2}, {"type": "linear", "out": 10}]}' \
  '{"dir": "/usr/share/datasets/fashion-mnist", "max_train_images": 256, "max_val_images": 16, "max_test_images": 16}'
gan_faces() {
  "$FIVEFOLD" images --out faces --lfw --size 16 >images.log 2>&1 || { cat images.log; fail "fivefold images --lfw"; }
  net_json run-gan.json '{"family": "gan", "channels": 1, "generator": {"filters": 8, "blocks": 1, "downsamples": 2},
            "critic": {"filters": 8, "layers": 2}, "content_weight": 100}' \
    "{\"dir\": \"$WORK/faces\", \"kernel_size\": 5, \"max_train_images\": 40, \"max_val_images\": 6}"
}

bf16_or_skip() {
  if ! "$FIVEFOLD" train --config run-moe.json --out probe --no-progress --precision bf16 --steps 1 >probe.log 2>&1; then
    if grep -q "avx512_bf16" probe.log; then
      echo "SKIP: bf16 cannot run here: $(tail -1 probe.log)"
      exit 77
    fi
    cat probe.log
    fail "a one-step bf16 run failed"
    finish precision_test
  fi
}

BF16_FP32_LOSS_RTOL=5e-3
BF16_FP32_WEIGHT_RTOL=1e-2
ADAM_DRIFT=1.5e-2 # 5 steps x lr 3e-3: the most Adam moves a weight whose gradient is noise
NETS_BF16_RTOL=5e-2

case "$MODE" in
  golden-openblas)
    for model in dense moe; do train 0 one-$model $model --grad-accum 4 --gemm-backend openblas || exit 1; done
    grep -q "gemm     openblas" one-moe.log || fail "the banner does not name the openblas backend"
    train 0 dnnl-moe moe --grad-accum 4 || exit 1
    grep -q "gemm     onednn (oneDNN ISA [a-z0-9_]*), precision fp32" dnnl-moe.log ||
      fail "the default banner does not name oneDNN, its ISA and fp32"
    same dnnl-moe one-moe 5
    train 2 dp2 moe --grad-accum 2 --gemm-backend openblas && same dp2 one-moe 5
    train 2 tp2 dense --grad-accum 4 --tp 2 --gemm-backend openblas && same tp2 one-dense 5
    train 2 pp2 dense --grad-accum 4 --pp 2 --gemm-backend openblas && same pp2 one-dense 5
    train 2 ep2 moe --grad-accum 2 --ep 2 --gemm-backend openblas && same ep2 one-moe 5
    train 2 cp2 moe --grad-accum 4 --cp 2 --gemm-backend openblas && same cp2 one-moe 5
    ;;
  golden-bf16)
    bf16_or_skip
    SAME_RTOL=2e-3
    SAME_ATOL=1e-3
    for model in dense moe; do train 0 one-$model $model --grad-accum 4 --precision bf16 || exit 1; done
    grep -q "precision bf16" one-moe.log || fail "the banner does not say bf16"
    grep -q "bf16 peak [0-9]* GFLOP/s" one-moe.log || fail "the banner does not state the bf16 peak"
    # bf16 really ran: the one-rank bf16 run differs from fp32.
    train 0 fp32-moe moe --grad-accum 4 || exit 1
    if $PY "$COMPARE" tensors "$(ckpt one-moe 5)/model.safetensors" "$(ckpt fp32-moe 5)/model.safetensors" 0 0 \
      >/dev/null; then
      fail "the bf16 run's weights equal the fp32 run's: bf16 did not run"
    fi
    train 2 dp2 moe --grad-accum 2 --precision bf16 && same dp2 one-moe 5
    train 2 tp2 dense --grad-accum 4 --tp 2 --precision bf16 && same tp2 one-dense 5
    train 2 pp2 dense --grad-accum 4 --pp 2 --precision bf16 && same pp2 one-dense 5
    train 2 ep2 moe --grad-accum 2 --ep 2 --precision bf16 && same ep2 one-moe 5
    # GPT-2 (LayerNorm, GeLU, biases, learned positions) in bf16: one rank
    # against its fp32 run, and TP2 against one bf16 rank.
    train 0 one-gpt2 gpt2 --grad-accum 4 --precision bf16 || exit 1
    train 0 fp32-gpt2 gpt2 --grad-accum 4 || exit 1
    if $PY "$COMPARE" tensors "$(ckpt one-gpt2 5)/model.safetensors" "$(ckpt fp32-gpt2 5)/model.safetensors" 0 0 \
      >/dev/null; then
      fail "the bf16 GPT-2 run's weights equal the fp32 run's: bf16 did not run"
    fi
    $PY "$COMPARE" losses one-gpt2 fp32-gpt2 "$BF16_FP32_LOSS_RTOL" ||
      fail "the bf16 GPT-2 run's losses are not within $BF16_FP32_LOSS_RTOL of the fp32 run's"
    $PY "$COMPARE" tensors "$(ckpt one-gpt2 5)/model.safetensors" "$(ckpt fp32-gpt2 5)/model.safetensors" \
      "$BF16_FP32_WEIGHT_RTOL" "$ADAM_DRIFT" ||
      fail "the bf16 GPT-2 run's weights are not finite or not near the fp32 run's"
    SAME_ATOL=$ADAM_DRIFT
    train 2 tp2-gpt2 gpt2 --grad-accum 4 --tp 2 --precision bf16 && same tp2-gpt2 one-gpt2 5
    ;;
  resume-bf16)
    bf16_or_skip
    run_json run-moe.json moe.json steps=6 interval=3
    train 0 straight moe --precision bf16 || exit 1
    train 0 first moe --precision bf16 --steps 3 || exit 1
    train 0 resumed moe --precision bf16 --resume "$(ckpt first 3)" || exit 1
    $PY "$COMPARE" losses resumed straight 0 || fail "the resumed bf16 run's losses differ from the straight run's"
    for f in model optimizer; do
      cmp -s "$(ckpt straight 6)/$f.safetensors" "$(ckpt resumed 6)/$f.safetensors" ||
        fail "the resumed bf16 run's $f.safetensors differs from the straight run's"
    done
    # bf16 -> fp32 -> bf16 through the same checkpoint format.
    train 0 to-fp32 moe --precision fp32 --resume "$(ckpt first 3)" || exit 1
    train 0 back-bf16 moe --precision bf16 --steps 8 --resume "$(ckpt to-fp32 6)" || exit 1
    [ -f "$(ckpt back-bf16 8)/model.safetensors" ] || fail "the bf16 continuation of an fp32 checkpoint saved nothing"
    SAME_RTOL=2e-3
    SAME_ATOL=1e-3
    same to-fp32 straight 6 # fp32 steps 4-6 stay near the bf16 ones
    ;;
  cache-bf16)
    bf16_or_skip
    # cached_matches NP NAME MODEL [flags]: the run NAME with the cache on
    # and NAME-off with it off are the same bit for bit.
    cached_matches() {
      local np=$1 name=$2 model=$3 f
      shift 3
      train "$np" "$name" "$model" --precision bf16 "$@" || return 1
      FIVEFOLD_BF16_WEIGHT_CACHE=off train "$np" "$name-off" "$model" --precision bf16 "$@" || return 1
      grep -q "bf16     weight cache on: [1-9][0-9]* matrices" "$name.log" ||
        fail "$name: the banner does not say the bf16 weight cache is on"
      grep -q "bf16     weight cache off" "$name-off.log" || fail "$name-off: the banner does not say the cache is off"
      $PY "$COMPARE" losses "$name" "$name-off" 0 || fail "$name: losses differ with the bf16 weight cache off"
      for f in model optimizer; do
        cmp -s "$(ckpt "$name" 5)/$f.safetensors" "$(ckpt "$name-off" 5)/$f.safetensors" ||
          fail "$name: $f.safetensors differs with the bf16 weight cache off"
      done
    }
    cached_matches 0 one-dense dense --grad-accum 2
    cached_matches 0 one-moe moe --grad-accum 2
    cached_matches 0 one-gpt2 gpt2 --grad-accum 2
    cached_matches 0 one-cnn cnn
    cached_matches 2 tp2-gpt2 gpt2 --grad-accum 2 --tp 2
    cached_matches 2 pp2-dense dense --grad-accum 4 --pp 2
    cached_matches 2 dp2-moe moe --grad-accum 2
    cached_matches 2 zero2-dense dense --grad-accum 2 --distributed-optimizer
    # A cached run resumed from an uncached one ends where that one does.
    train 0 resumed-gpt2 gpt2 --precision bf16 --grad-accum 2 --resume "$(ckpt one-gpt2-off 3)" || exit 1
    for f in model optimizer; do
      cmp -s "$(ckpt one-gpt2-off 5)/$f.safetensors" "$(ckpt resumed-gpt2 5)/$f.safetensors" ||
        fail "a cached run resumed from an uncached one: $f.safetensors differs"
    done
    # The comparison catches a stale cache: copies kept across optimizer
    # steps make step 2 on run with step 1's weights.
    FIVEFOLD_TEST_BF16_CACHE_STALE=1 train 0 stale-gpt2 gpt2 --precision bf16 --grad-accum 2 || exit 1
    if $PY "$COMPARE" losses stale-gpt2 one-gpt2-off 0 >/dev/null; then
      fail "a bf16 weight cache left stale after each step trained the same losses: the check cannot fail"
    fi
    if FIVEFOLD_BF16_WEIGHT_CACHE=maybe "$FIVEFOLD" train --config run-gpt2.json --out badenv --no-progress \
      --precision bf16 >badenv.log 2>&1; then
      fail "FIVEFOLD_BF16_WEIGHT_CACHE=maybe was accepted"
    fi
    grep -q 'FIVEFOLD_BF16_WEIGHT_CACHE must be "on" or "off", got "maybe"' badenv.log ||
      { cat badenv.log; fail "no clear message for FIVEFOLD_BF16_WEIGHT_CACHE=maybe"; }
    ;;
  nets-bf16)
    bf16_or_skip
    # near_fp32 MODEL WHAT: MODEL trained in bf16 says so, differs from
    # its fp32 run and stays near it (loss and grad norm).
    near_fp32() {
      train 0 "$1-fp32" "$1" || exit 1
      train 0 "$1-bf16" "$1" --precision bf16 || exit 1
      grep -q "precision bf16 (bf16 inputs to the convolutions and dense layers" "$1-bf16.log" ||
        fail "the $2's bf16 banner does not say what bf16 covers"
      grep -q "bf16     weight cache on: [1-9][0-9]* matrices" "$1-bf16.log" ||
        fail "the $2's banner does not state the bf16 weight cache over its matrices"
      if $PY "$COMPARE" tensors "$(ckpt "$1-bf16" 5)/model.safetensors" "$(ckpt "$1-fp32" 5)/model.safetensors" 0 0 \
        >/dev/null; then
        fail "the $2's bf16 weights equal its fp32 weights: bf16 did not run"
      fi
      $PY "$COMPARE" values "$1-bf16" "$1-fp32" loss,grad_norm "$NETS_BF16_RTOL" ||
        fail "the $2's bf16 losses are not within $NETS_BF16_RTOL of its fp32 losses"
    }
    near_fp32 cnn CNN
    $PY "$COMPARE" tensors "$(ckpt cnn-bf16 5)/model.safetensors" "$(ckpt cnn-fp32 5)/model.safetensors" \
      "$BF16_FP32_WEIGHT_RTOL" "$ADAM_DRIFT" || fail "the CNN's bf16 weights are not finite or not near its fp32 weights"
    SAME_RTOL=2e-3
    SAME_ATOL=1e-3
    train 2 cnn-dp2 cnn --grad-accum 1 --precision bf16 && same cnn-dp2 cnn-bf16 5
    train 0 cnn-blas cnn --gemm-backend openblas || exit 1
    grep -q "gemm     openblas" cnn-blas.log || fail "the CNN's banner does not name the openblas backend"
    gan_faces
    near_fp32 gan GAN
    ;;
  refuse-bf16)
    gan_faces
    for model in cnn gan; do
      if ONEDNN_MAX_CPU_ISA=AVX2 "$FIVEFOLD" train --config run-$model.json --out capped-$model --no-progress \
        --precision bf16 >capped-$model.log 2>&1; then
        fail "--precision bf16 was accepted for the $model with oneDNN capped to AVX2"
      fi
      grep -q "avx512_bf16" capped-$model.log || { cat capped-$model.log; fail "the $model's refusal does not name avx512_bf16"; }
      [ -e "capped-$model/metrics.jsonl" ] && fail "the refused $model run wrote metrics"
    done
    if ONEDNN_MAX_CPU_ISA=AVX2 "$FIVEFOLD" train --config run-moe.json --out capped --no-progress --precision bf16 \
      >capped.log 2>&1; then
      fail "--precision bf16 was accepted with oneDNN capped to AVX2"
    fi
    grep -q "avx512_bf16" capped.log || { cat capped.log; fail "the refusal does not name the avx512_bf16 feature"; }
    grep -q "ONEDNN_MAX_CPU_ISA" capped.log || fail "the refusal does not name the ISA cap"
    grep -q "^step " capped.log && fail "training started before the refusal"
    [ -e "capped/metrics.jsonl" ] && fail "the refused run wrote metrics"
    ONEDNN_MAX_CPU_ISA=AVX2 train 0 capped-fp32 moe || exit 1
    grep -q "oneDNN ISA avx2" capped-fp32.log || fail "the capped fp32 run's banner does not say avx2"
    if "$FIVEFOLD" train --config run-moe.json --out bad1 --no-progress --precision fp16 >bad1.log 2>&1; then
      fail "--precision fp16 was accepted"
    fi
    grep -q 'training.precision must be "fp32" or "bf16", got "fp16"' bad1.log || fail "no clear message for fp16"
    if "$FIVEFOLD" train --config run-moe.json --out bad2 --no-progress --gemm-backend mkl >bad2.log 2>&1; then
      fail "--gemm-backend mkl was accepted"
    fi
    grep -q 'training.gemm_backend must be "onednn" or "openblas", got "mkl"' bad2.log ||
      fail "no clear message for mkl"
    ;;
  *)
    echo "unknown mode $MODE"
    exit 2
    ;;
esac
finish precision_test
