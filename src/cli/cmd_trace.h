/* `fivefold trace`: record a run with eBPF, analyze a trace file (critical
 * path, bubble, exposed communication, stragglers, timing statistics, DOT),
 * and check that a trace can be compared with a prediction (src/trace/). */
#ifndef FIVEFOLD_CLI_CMD_TRACE_H
#define FIVEFOLD_CLI_CMD_TRACE_H

/* argv[0] is the command name ("trace"), argv[1] the subcommand (record,
 * analyze, compare-ready). Returns the process exit code: 0 ok, 1 failure
 * while running (or a trace not ready for comparison), 2 bad usage. */
int cmd_trace(int argc, char **argv);

#endif
