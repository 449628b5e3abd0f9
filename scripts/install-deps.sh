#!/usr/bin/env bash
# Installs every Debian package fivefold needs to build, test, run the demo and
# the benchmarks. Idempotent: packages already present are not touched, and
# apt-get update runs only when something is missing.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev        # cblas GEMM; the OpenMP build shares our thread pool
  libdnnl-dev                   # oneDNN: GEMM/matmul (fp32, bf16) and convolution kernels
  zlib1g-dev                    # gzip'd IDX image files (Fashion-MNIST)
  libpng-dev                    # PNG image files (base/image_io.c: blur, images, deblur)
  libjpeg-dev                   # JPEG photos read by base/image_io.c (dlib's example faces)
  libdlib19.1                   # its examples/faces: photos with annotated face boxes (fivefold images --dlib)
  python3-skimage               # PSNR/SSIM reference (tests/torch_ref/image_metrics_parity.py), lfw_subset.npy faces
  dataset-fashion-mnist         # Fashion-MNIST IDX files under /usr/share/datasets/fashion-mnist (base.idx)
  libcjson-dev                  # JSON configs, safetensors headers
  libcmocka-dev                 # unit-test framework (run under ctest)
  openmpi-bin libopenmpi-dev    # the multi-rank runtime and its launcher
  python3 python3-numpy python3-torch   # PyTorch reference tests and benchmarks
  python3-matplotlib            # the PNG plots of bench/tropical/experiments.sh
  bible-kjv                     # default real-text corpus (public domain)
  clang libclang-rt-dev         # libFuzzer harnesses of the file readers (tests/fuzz)
  systemtap-sdt-dev             # <sys/sdt.h>: USDT probes of the tracer (src/trace/probes.h)
  bpftrace                      # fivefold trace record --ebpf
  graphviz                      # dot: renders the DAGs of fivefold trace analyze --dot
  gnuplot-nox                   # plots of bench/upcycling/run.sh (PNG, no X)
  python3-opencv opencv-data    # bench/deblur only: the Haar face detector and its cascade files
  iproute2 util-linux procps    # ip netns, tc, unshare, taskset, sysctl: the emulated cluster of scripts/netns-cluster.sh
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
