# shellcheck shell=bash
# Shared by the eBPF tests (ebpf_test.sh, ebpf_train_test.sh); sourced.
#
# ebpf_probe: decides, before anything of fivefold runs, whether eBPF
# tracing is possible here at all, with a trivial bpftrace one-liner. Exits
# 77 (a skip) when it is not: not root, or the kernel or container refuses
# bpf() (a property of the machine, printed as "not available here"); or
# bpftrace is missing (a missing dependency, printed as such so that the
# end of `make test` reports it and CI fails). Once the probe has passed,
# every bpftrace failure is a test failure: a syntax error in the script
# fivefold generates, probes it cannot attach, an incomplete trace.
ebpf_probe() {
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP (not available here): eBPF tracing needs root"
    exit 77
  fi
  if ! command -v bpftrace >/dev/null; then
    echo "SKIP (missing dependency: bpftrace): bpftrace is not installed; run scripts/install-deps.sh"
    exit 77
  fi
  local out
  out=$(timeout 60 bpftrace -e 'BEGIN { printf("fivefold-ebpf-probe-ok\n"); exit(); }' 2>&1)
  if ! grep -q "fivefold-ebpf-probe-ok" <<<"$out"; then
    echo "$out" | grep -v RLIMIT_MEMLOCK | head -5
    echo "SKIP (not available here): bpftrace cannot run even a BEGIN probe (bpf() refused by the kernel or container)"
    exit 77
  fi
  echo "eBPF probe: bpftrace runs here; from now on a bpftrace failure is a failure"
}
