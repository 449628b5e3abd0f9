/* The trace file: one Chrome trace JSON (open in Perfetto) for the whole
 * run, written on one rank from every rank's buffer, and read back by the
 * analyzer.
 *
 *   {"traceEvents": [
 *      {"ph":"M","name":"process_name","pid":w,...}        one process per world rank
 *      {"ph":"M","name":"thread_name","pid":w,"tid":s,...} compute 0, p2p 1, collective 2, ops 3
 *      {"ph":"X","name":"F3","cat":"FWD","pid":w,"tid":stream,"ts":us,"dur":us,
 *       "args":{"id","iter","mb","chunk","stage","layer","peer","bytes","group","group_id","oncpu_us"}}
 *      {"ph":"X","name":"gemm","cat":"op","pid":w,"tid":3,...,
 *       "args":{"kind","iter","mb","layer","m","n","k","bytes","group","peer","oncpu_us"}}
 *      {"ph":"s"/"f","cat":"p2p"|"collective","id":n,"bp":"e",...}  flow arrows
 *   ],
 *   "displayTimeUnit": "ms",
 *   "otherData": {"format": "fivefold.trace", "version": 1, "source", "clock",
 *                 "origin_ns", "grid": {...}, "ranks": [{"world_rank", "pipeline_rank",
 *                 "tp", "cp", "dp", "pp", "etp", "ep", "edp", "host", "clock_offset_ns",
 *                 "events", "dropped"}], "config": {...}, "model": {...}, "session": {...},
 *                 "plan": {"file", "cluster", "gpus", "mapping": {"device_of_rank": [...]}}
 *                 (a run of `train --plan`; mapping only when the plan has one),
 *                 "program": <sched program JSON, program.h>}}
 *
 * Times are µs since the earliest stamp of the run (origin_ns, on rank 0's
 * clock after each rank's offset), written to the ns. Flow arrows go from
 * each SEND to its matching RECV, and for each collective from the
 * participant that arrived last to every other participant (the one they
 * all waited for). Optional args (-1 in the event) are left out. */
#ifndef FIVEFOLD_TRACE_CHROME_WRITER_H
#define FIVEFOLD_TRACE_CHROME_WRITER_H

#include <stdio.h>

#include "base/error.h"
#include "trace/run.h"

#define TRACE_TID_OPS 3 /* the track of layer sub-operations */

/* Writes the file at path (via path.tmp + rename). ranks[i] must be world
 * rank i. meta->program may be NULL (no flow arrows, no analysis). */
int trace_chrome_write(const char *path, const TraceRunMeta *meta, const TraceRankBuffer *ranks, int num_ranks,
                       Error *err);
int trace_chrome_write_stream(FILE *f, const TraceRunMeta *meta, const TraceRankBuffer *ranks, int num_ranks,
                              Error *err);

/* Reads a file written by trace_chrome_write. */
int trace_chrome_read(const char *path, TraceRun *out, Error *err);
int trace_chrome_from_json(const cJSON *root, const char *origin, TraceRun *out, Error *err);

#endif
