/* The program checker: the one place that judges whether a program is a
 * correct training iteration before anyone runs, prices or traces it.
 *
 * A program passes when
 *  - its ids, ranks, positions, streams and stage fields are consistent and
 *    every dependency names an action of the program; local dependencies
 *    point to earlier positions, and the only cross-rank dependency is a
 *    RECV's on its SEND;
 *  - every SEND has exactly one matching RECV on its peer (same link kind,
 *    micro-batch and stage pair) and vice versa, the match fields point at
 *    each other, and every transfer goes between neighbouring stages;
 *  - each rank runs the forward and the backward of each of its
 *    (micro-batch, chunk) pairs exactly once, backward after forward, with
 *    the data each needs received before it and sent after it (and the
 *    dependencies that say so);
 *  - with a split backward (config.split_backward) each (micro-batch,
 *    chunk) runs its weight gradient (BWD_WEIGHT) once, after and depending
 *    on its backward; without it, no BWD_WEIGHT appears;
 *  - each chunk's gradients are reduced after its last backward (its last
 *    weight gradient when split), and one
 *    OPTIM per rank follows all computes and waits for all reductions;
 *  - it completes when every rank runs its list strictly in order with
 *    blocking (rendezvous) sends and receives, by simulation (evaluate.h);
 *    then no executor, blocking or not, can deadlock on it.
 * A phased program (config.param_groups > 1) passes when every action names
 * a group and each phase, the actions of one group, passes on its own.
 * The error message names the offending actions ("rank 1 #7 SEND_ACT mb 3
 * stage 1->2 (peer rank 2) (id 23) ..."). */
#ifndef FIVEFOLD_SCHED_CHECK_H
#define FIVEFOLD_SCHED_CHECK_H

#include "base/error.h"
#include "sched/program.h"

/* ERR_OK, or ERR_CONFIG with the first problems found and their count. */
int sched_check(const SchedProgram *prog, Error *err);

#endif
