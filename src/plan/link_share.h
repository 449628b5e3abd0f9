/* Contention on a node's shared network port (NIC, uplink), in the
 * simulator.
 *
 * The cost model prices every transfer on an idle link. When several
 * devices of a node share one port (ClusterSpec.tiers.devices_per_nic, the
 * spec's "topology.devices_per_nic"), the messages of all of them that
 * leave the node queue on it, and a message waits behind every byte queued
 * before it. This file prices that:
 *   - the port is one FIFO server per NIC and direction (its egress): it
 *     sends one message at a time at its full rate (devices_per_nic x the
 *     per-device inter-node bandwidth the spec carries), in the order the
 *     messages became ready, each delivered its link's latency after its
 *     last byte left. FIFO, not processor sharing: the port is one queue of
 *     packets (a switch port or the emulated cluster's tbf qdisc), and a
 *     step's backlog fits in it, so a small message at the end of a step
 *     leaves after the pipeline's messages queued before it; processor
 *     sharing would let it through at once, which is not what a queue does.
 *     Two messages ready together take as long as both their bytes (the
 *     last one), as under any sharing of the rate.
 *   - messages between one pair of devices are delivered in order: a later
 *     message of the pair is not served before the last byte of an earlier
 *     one has left, even while the earlier one is held (MPI's
 *     non-overtaking rule; one TCP connection per pair).
 *   - without asynchronous progress (the spec's runtime.async_progress
 *     false: fivefold's CPU runtime over Open MPI) a message above the
 *     eager limit moves only inside MPI calls of both its ranks: it is not
 *     served while its sender or its receiver computes (their CPU parts:
 *     forward, backward, weight gradients, the optimizer's update), nor
 *     before the receiver has posted its receive (the rendezvous); while it
 *     is held, the port serves the next message it can. A message at most
 *     the eager limit is handed to the kernel when it is sent and moves
 *     whatever its ranks do.
 *
 * In the simulator (plan_simulate) the ports run inside the evaluation:
 * the processor-sharing event simulation (sched/evaluate_shared.h) hands
 * them each SEND as it finishes and each RECV as it is posted, and they
 * release the RECV when its messages have arrived, under the ranks'
 * compute state of every moment (sched's SchedLinkModel). A program
 * without shared cores runs there at full speed, the max-plus result but
 * for these transfers.
 *
 * What it covers: the pipeline's transfers of a program whose ranks are
 * pipeline ranks (each standing for its TP x CP x DP group: one message per
 * device of the group, the transfer arriving with its last one). Not
 * covered: stage-replicated programs and the collectives (gradient
 * reductions, the parameter gather) keep their calibrated prices, which
 * already hold the sharing among a node's devices measured all at once.
 * The receiving port is not a server of its own (a non-blocking switch;
 * with two nodes one node's egress is the other's ingress). Inactive (the
 * max-plus or processor-sharing evaluation unchanged, bit for bit) on one
 * node, without devices_per_nic, or when no transfer crosses a node. */
#ifndef FIVEFOLD_PLAN_LINK_SHARE_H
#define FIVEFOLD_PLAN_LINK_SHARE_H

#include "base/error.h"
#include "plan/cluster.h"
#include "plan/parallel.h"
#include "sched/evaluate.h"
#include "sched/evaluate_shared.h"

/* Open MPI's TCP transport sends messages up to this size eagerly (its
 * btl_tcp_eager_limit default). */
#define PLAN_LINK_EAGER_BYTES 65536.0

/* One message over one NIC's egress. */
typedef struct PlanLinkJob {
  int nic;           /* the port it leaves by */
  int src, dst;      /* the ranks at its ends (whose compute holds it; see held) */
  int pair;          /* its connection: messages of one pair are delivered in order of ready */
  double ready;      /* s: it may start (sent and, when held, its receive posted) */
  double service;    /* s: its bytes at the port's rate */
  double latency;    /* s: from its last byte to its delivery */
  int held;          /* 1: not served while src or dst computes */
  double done;       /* out: delivered */
} PlanLinkJob;

/* When each rank computes: intervals [start[i], end[i]) for i in
 * begin[r] .. begin[r + 1] - 1, sorted and disjoint per rank. */
typedef struct PlanLinkBusy {
  int num_ranks;
  const int *begin;
  const double *start, *end;
} PlanLinkBusy;

/* Simulates the ports over a given timeline (each message ready at its
 * `ready`, the ranks computing in `busy`): fills jobs[i].done. busy may be
 * NULL (nobody computes). The simulator runs the same ports inside its
 * evaluation. Errors: a rank outside busy, a negative or non-finite time. */
int plan_link_share_run(PlanLinkJob *jobs, int n, const PlanLinkBusy *busy, Error *err);

typedef struct PlanPorts PlanPorts; /* link_share.c */

/* The simulator's side: which sends cross a port, their messages, and the
 * link model the evaluator calls. */
typedef struct PlanLinkShare {
  int active;
  int held;        /* no asynchronous progress: compute holds the messages above the eager limit */
  int num_sends;   /* sends with a message crossing a port */
  int *send;       /* their action ids */
  int *recv;       /* their receives' action ids */
  int *job_begin;  /* num_sends + 1: their messages in jobs[job_begin[i] .. job_begin[i + 1]) */
  PlanLinkJob *jobs;
  double *local;   /* per send: the slowest of its messages that stay on a node (0: none) */
  int *index;      /* per action id: the send's or receive's index above, -1 */
  double *sent_at, *posted_at; /* per send: when, NAN until then */
  int *pending;    /* per send: messages (and the local part) not yet delivered */
  PlanPorts *ports;
  SchedLinkModel model;
  SchedShareOptions share; /* processor sharing's, or full speed, with the model */
  double *own_capacity, *own_load; /* the full-speed options' arrays (owned) */
} PlanLinkShare;

/* Sets ls->active and, when active, the messages of prog's transfers:
 * bytes per device (p2p_bytes), one message per device of the sending
 * rank's group to the device of the same place in the receiving group
 * (world rank k + r x G, G = TP x CP x DP), each on its own device's port. */
int plan_link_share_init(PlanLinkShare *ls, const ClusterSpec *cl, const PlanConfig *cfg, const SchedProgram *prog,
                         double p2p_bytes, Error *err);
void plan_link_share_free(PlanLinkShare *ls);

/* Evaluates prog with the ports (opts' transfer prices the other sends)
 * under processor sharing when share is not NULL, else at full speed;
 * work gives the CPU part of an action (what holds a message) when share
 * is NULL. */
int plan_link_share_evaluate(PlanLinkShare *ls, const SchedProgram *prog, const SchedEvalOptions *opts,
                             const SchedShareOptions *share, SchedWorkFn work, void *work_ctx, SchedEval *out,
                             Error *err);

#endif
