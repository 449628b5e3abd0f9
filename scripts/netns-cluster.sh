#!/usr/bin/env bash
# netns-cluster.sh: an emulated cluster of two "hosts" on one machine, to
# run fivefold across a real (rate-limited) network under mpirun.
#
#   scripts/netns-cluster.sh up NAME [RATE]     make cluster NAME (uplink RATE, tc syntax: 100mbit; default 1gbit)
#   scripts/netns-cluster.sh rate NAME RATE     change the uplink's rate
#   scripts/netns-cluster.sh link NAME up|down  take the uplink down or up again
#   scripts/netns-cluster.sh mpirun NAME ARGS   mpirun ARGS on the cluster (2 slots per host)
#   scripts/netns-cluster.sh down NAME          remove everything `up` made (idempotent)
#   scripts/netns-cluster.sh check              exit 0 when this machine can make one (root,
#                                               ip netns, veth, tbf), else say why and exit 77
#
# What `up` makes (NAME: letters and digits, at most 8, unique per run):
#   * two network namespaces, the hosts NAME-h0 and NAME-h1;
#   * a management network: a bridge NAMEb in the root namespace (where
#     mpirun and its out-of-band channel run) with a veth pair to each host;
#     Open MPI's launch and out-of-band traffic stays on it (oob_tcp_if_include);
#   * the uplink: one veth pair straight between the hosts, with a tbf
#     qdisc on each end's egress at RATE; MPI's TCP transport between the
#     hosts uses only it (btl_tcp_if_include); inside a host the ranks use
#     shared memory (vader). Taking the uplink down therefore cuts the
#     ranks of one host off from the other's while mpirun still reaches
#     every rank, as when a node's data network fails;
#   * addresses from two free /24s of 10.200.0.0 - 10.249.255.0 (a /24 no
#     route of the root namespace covers), chosen under a lock;
#   * each host its own CPU: host i runs on core i mod (cores), so that the
#     "hosts" do not share cores with each other (they do with other
#     processes of the machine).
# The state (hostfile, addresses, each host's core) lives in
# /run/fivefold-netns/NAME; scripts/netns-rsh (Open MPI's rsh agent) reads it
# to start a command inside a host. Everything stays on the namespaces'
# own addresses; `down` kills what still runs inside the hosts, deletes
# them (which deletes their veths), the bridge and the state.
set -u
STATE_ROOT=/run/fivefold-netns
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "netns-cluster: $*" >&2; exit 1; }

check() {
  # A missing program is a missing dependency (scripts/install-deps.sh);
  # no root or no namespaces is a property of the machine.
  command -v ip >/dev/null && command -v tc >/dev/null ||
    { echo "netns-cluster: missing dependency: iproute2 (ip, tc)"; return 77; }
  command -v unshare >/dev/null && command -v taskset >/dev/null ||
    { echo "netns-cluster: missing dependency: util-linux (unshare, taskset)"; return 77; }
  command -v sysctl >/dev/null || { echo "netns-cluster: missing dependency: procps (sysctl)"; return 77; }
  [ "$(id -u)" = 0 ] || { echo "netns-cluster: needs root (ip netns): not run on this machine"; return 77; }
  local probe=ffprobe$$
  ip netns add "$probe" 2>/dev/null || { echo "netns-cluster: ip netns add is not permitted here"; return 77; }
  local ok=0
  if ip netns exec "$probe" ip link add "${probe}a" type veth peer name "${probe}b" 2>/dev/null; then
    ip netns exec "$probe" ip link set "${probe}a" up 2>/dev/null
    ip netns exec "$probe" tc qdisc add dev "${probe}a" root tbf rate 10mbit burst 32kb latency 50ms 2>/dev/null && ok=1
  fi
  ip netns del "$probe" 2>/dev/null
  [ "$ok" = 1 ] || { echo "netns-cluster: veth or the tbf qdisc is not available"; return 77; }
  return 0
}

valid_name() {
  [[ "$1" =~ ^[A-Za-z][A-Za-z0-9]{0,7}$ ]] || die "cluster name '$1': expected a letter then up to 7 letters or digits"
}

# A /24 (as "10.A.B") that no root route covers and no other cluster took.
subnet_taken() {
  local net=$1
  ip -4 route show table all 2>/dev/null | grep -q "^$net\.\|[^0-9]$net\." && return 0
  grep -qs "^$net$" "$STATE_ROOT"/*/subnets && return 0
  return 1
}
pick_subnet() {
  local i net
  for i in $(seq 1 200); do
    net="10.$((200 + RANDOM % 50)).$((RANDOM % 256))"
    subnet_taken "$net" || { echo "$net"; return 0; }
  done
  return 1
}

# NS DEV RATE: the uplink end's egress at RATE. A small bucket (32 KB), so
# that a message is not sent at memory speed until the bucket is empty (the
# link then looks like its rate at every size); a queue of at most 25 ms at
# that rate, so that a small message behind a large transfer waits about
# as long as on a switch port, not for seconds of queued bytes.
tbf() {
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst 32kb latency 25ms
}

up() {
  local name=$1 rate=${2:-1gbit}
  valid_name "$name"
  check >/dev/null || die "$(check)"
  local st=$STATE_ROOT/$name
  mkdir -p "$STATE_ROOT"
  exec 9>"$STATE_ROOT/.lock"
  flock 9
  [ -e "$st" ] && die "cluster $name exists already ($st); use another name or 'down $name'"
  ip netns list 2>/dev/null | grep -q "^$name-h[01]\b" && die "namespaces $name-h* exist already; use another name"
  mkdir -p "$st"
  # From here on a failure removes what was made.
  die() { echo "netns-cluster: $*" >&2; down "$name" >/dev/null 2>&1; exit 1; }
  local mgmt uplink
  mgmt=$(pick_subnet) || die "no free 10.x.y.0/24 for the management network"
  echo "$mgmt" >"$st/subnets"
  uplink=$(pick_subnet) || die "no free 10.x.y.0/24 for the uplink"
  echo "$uplink" >>"$st/subnets"
  local br=${name}b cores
  # The cores this process may run on; not plain nproc, which follows
  # OMP_NUM_THREADS (1 in a benchmark's environment put both hosts on core 0).
  cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  ip link add "$br" type bridge || die "cannot make bridge $br"
  ip addr add "$mgmt.1/24" dev "$br"
  ip link set "$br" up
  : >"$st/hostfile"
  local i ns
  for i in 0 1; do
    ns=$name-h$i
    ip netns add "$ns" || die "cannot make namespace $ns"
    ip netns exec "$ns" ip link set lo up
    # As on a cluster's data network: a connection that was idle for a while
    # (between two pipeline messages) keeps its congestion window instead of
    # starting slowly again, so a transfer costs latency + bytes / rate.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0 2>/dev/null
    ip link add "${name}m$i" type veth peer name "${name}n$i" || die "cannot make veth ${name}m$i"
    ip link set "${name}n$i" netns "$ns"
    ip link set "${name}m$i" master "$br"
    ip link set "${name}m$i" up
    ip netns exec "$ns" ip addr add "$mgmt.$((10 + i))/24" dev "${name}n$i"
    ip netns exec "$ns" ip link set "${name}n$i" up
    echo "$ns slots=2" >>"$st/hostfile"
    echo "core=$((i % cores))" >"$st/host-$ns"
  done
  ip link add "${name}u0" type veth peer name "${name}u1" || die "cannot make the uplink veth"
  for i in 0 1; do
    ns=$name-h$i
    ip link set "${name}u$i" netns "$ns"
    ip netns exec "$ns" ip addr add "$uplink.$((1 + i))/24" dev "${name}u$i"
    ip netns exec "$ns" ip link set "${name}u$i" up
    tbf "$ns" "${name}u$i" "$rate" || die "cannot put a tbf qdisc on ${name}u$i"
  done
  echo "$rate" >"$st/rate"
  flock -u 9
  cat >"$st/mpirun-args" <<EOF
--hostfile $st/hostfile
--mca plm_rsh_agent $HERE/netns-rsh
--mca plm_rsh_no_tree_spawn 1
--mca pml ob1
--mca btl self,vader,tcp
--mca btl_tcp_if_include $uplink.0/24
--mca oob_tcp_if_include $mgmt.0/24
--mca mpi_yield_when_idle 1
--bind-to none
EOF
}

down() {
  local name=$1 i ns pid
  valid_name "$name"
  for i in 0 1; do
    ns=$name-h$i
    if ip netns list 2>/dev/null | grep -q "^$ns\b"; then
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
      ip netns del "$ns" 2>/dev/null
    fi
  done
  ip link del "${name}b" 2>/dev/null
  for i in 0 1; do ip link del "${name}m$i" 2>/dev/null; done
  rm -rf "${STATE_ROOT:?}/$name"
  return 0
}

need_up() { [ -d "$STATE_ROOT/$1" ] || die "no cluster $1 (run 'up $1' first)"; }

case ${1:-} in
  check) check; exit $? ;;
  up) [ $# -ge 2 ] || die "usage: up NAME [RATE]"; up "$2" "${3:-}" || exit 1 ;;
  down) [ $# -ge 2 ] || die "usage: down NAME"; down "$2" ;;
  rate)
    [ $# -ge 3 ] || die "usage: rate NAME RATE"
    need_up "$2"
    for i in 0 1; do tbf "$2-h$i" "$2u$i" "$3" || die "cannot set rate $3"; done
    echo "$3" >"$STATE_ROOT/$2/rate"
    ;;
  link)
    [ $# -ge 3 ] && { [ "$3" = up ] || [ "$3" = down ]; } || die "usage: link NAME up|down"
    need_up "$2"
    for i in 0 1; do ip netns exec "$2-h$i" ip link set "$2u$i" "$3" || die "cannot set the uplink $3"; done
    ;;
  mpirun)
    [ $# -ge 2 ] || die "usage: mpirun NAME ARGS..."
    need_up "$2"
    name=$2
    shift 2
    # shellcheck disable=SC2046
    exec "${FIVEFOLD_MPIRUN:-mpirun}" $(cat "$STATE_ROOT/$name/mpirun-args") "$@"
    ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
