/* Running a command under bpftrace (ebpf.h): the script, tracefs, the
 * preflight checks and the process choreography (the command forked and
 * held, bpftrace started on its processes, the command released once
 * bpftrace says its probes are attached, SIGINT to bpftrace when the
 * command is done). */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trace/ebpf.h"

#define READY_MARK "FIVEFOLD_READY"

char *trace_ebpf_script(const char *binary, int with_sched, int root_pid) {
  /* The readiness mark comes from an interval probe placed last: bpftrace
   * fires BEGIN before it attaches the other probes, and attaches them in
   * program order, so the first tick of the last one means every USDT site
   * (one per inlined operation probe: hundreds in fivefold) is attached. A
   * mark from BEGIN let a quick command run before its rank probe was.
   *
   * Uprobes fire in every process that runs the binary, so with root_pid
   * the USDT probes keep only the processes descended from it: the fork
   * tracepoint adds every task a marked one creates (threads included, so a
   * launcher that forks from a helper thread still counts), and `pid` is
   * the process (thread group) id. Another job on the machine that runs the
   * same binary is then not in the trace. */
  const char *fmt =
      "%3$s"
      "usdt:%1$s:fivefold:rank %4$s{ @ff_tid[tid] = 1; printf(\"R %%d %%d %%d %%d %%d %%llu\\n\", tid, pid, arg0, "
      "arg1, arg2, nsecs); }\n"
      "usdt:%1$s:fivefold:iteration %4$s{ printf(\"I %%d %%d %%llu\\n\", tid, arg0, nsecs); }\n"
      "usdt:%1$s:fivefold:action_begin %4$s{ @ff_tid[tid] = 1; printf(\"AB %%d %%llu %%d %%d %%d %%d\\n\", tid, nsecs, "
      "arg0, arg1, arg2, arg3); }\n"
      "usdt:%1$s:fivefold:action_end %4$s{ printf(\"AE %%d %%llu %%d %%d %%lld %%d %%d %%d\\n\", tid, nsecs, arg0, "
      "arg1, arg2, arg3, arg4, arg5); }\n"
      "usdt:%1$s:fivefold:op_begin %4$s{ printf(\"OB %%d %%llu %%d %%d %%d\\n\", tid, nsecs, arg0, arg1, arg2); }\n"
      "usdt:%1$s:fivefold:op_shape %4$s{ printf(\"OS %%d %%llu %%d %%d %%d\\n\", tid, nsecs, arg0, arg1, arg2); }\n"
      "usdt:%1$s:fivefold:op_end %4$s{ printf(\"OE %%d %%llu %%d %%d %%d %%lld %%d %%d\\n\", tid, nsecs, arg0, arg1, "
      "arg2, arg3, arg4, arg5); }\n"
      "%2$s"
      "interval:ms:20 /@ff_ready == 0/ { @ff_ready = 1; printf(\"" READY_MARK "\\n\"); }\n"
      "END { clear(@ff_tid); clear(@ff_ready);%5$s }\n";
  const char *sched = with_sched ? "tracepoint:sched:sched_switch /@ff_tid[args->prev_pid] || @ff_tid[args->next_pid]/ "
                                   "{ printf(\"S %llu %d %d %d\\n\", nsecs, cpu, args->prev_pid, args->next_pid); }\n"
                                 : "";
  char lineage[256] = "";
  if (root_pid > 0)
    snprintf(lineage, sizeof lineage,
             "BEGIN { @ff_mine[%d] = 1; }\n"
             "tracepoint:sched:sched_process_fork /@ff_mine[args->parent_pid]/ { @ff_mine[args->child_pid] = 1; }\n",
             root_pid);
  const char *filter = root_pid > 0 ? "/@ff_mine[pid]/ " : "";
  const char *clear = root_pid > 0 ? " clear(@ff_mine);" : "";
  int n = snprintf(NULL, 0, fmt, binary, sched, lineage, filter, clear);
  char *s = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (s) snprintf(s, (size_t)n + 1, fmt, binary, sched, lineage, filter, clear);
  return s;
}

int trace_ebpf_prepare_tracefs(Error *err) {
  if (access("/sys/kernel/tracing/events", F_OK) == 0 || access("/sys/kernel/debug/tracing/events", F_OK) == 0)
    return ERR_OK;
  if (errno == EACCES || geteuid() != 0)
    return error_set(err, ERR_CONFIG,
                     "eBPF tracing needs root: tracefs (/sys/kernel/tracing) is not accessible to this user, and "
                     "bpftrace needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN");
  mkdir("/sys/kernel/tracing", 0700); /* usually there already */
  if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL) != 0)
    return error_set(err, ERR_CONFIG,
                     "tracefs is not mounted at /sys/kernel/tracing and mounting it failed (%s): eBPF tracing needs "
                     "root (CAP_SYS_ADMIN) and a kernel with tracefs; in a container, run it privileged or mount "
                     "tracefs from the host",
                     error_errno_text(errno));
  return ERR_OK;
}

/* The full path of an executable named by argv[0]-style `name`, or NULL. */
static char *which(const char *name) {
  if (strchr(name, '/')) return access(name, X_OK) == 0 ? realpath(name, NULL) : NULL;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  char buf[4096];
  for (const char *p = path; *p;) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/%s", (int)len, p, name);
    if (len && access(buf, X_OK) == 0) return realpath(buf, NULL);
    p += len + (colon ? 1 : 0);
  }
  return NULL;
}

static char *slurp_fd_file(const char *path, size_t max) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = malloc(max + 1);
  size_t n = buf ? fread(buf, 1, max, f) : 0;
  if (buf) buf[n] = '\0';
  fclose(f);
  return buf;
}

/* bpftrace's error text without its harmless RLIMIT_MEMLOCK complaint
 * (recent kernels account BPF memory to the cgroup instead). */
static void clean_stderr(char *text) {
  char *out = text;
  for (char *line = text; *line;) {
    char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
    if (!strstr(line, "RLIMIT_MEMLOCK") || (nl && strstr(line, "RLIMIT_MEMLOCK") > nl)) {
      memmove(out, line, len);
      out += len;
    }
    line += len;
  }
  *out = '\0';
  while (out > text && (out[-1] == '\n' || out[-1] == ' ')) *--out = '\0';
}

static int is_permission_problem(const char *text) {
  return strstr(text, "Operation not permitted") || strstr(text, "Permission denied") || strstr(text, "EPERM") ||
         strstr(text, "permission");
}

/* Set when bpftrace's own error output explains a failure: its file is kept. */
static _Thread_local int keep_err;

static int bpftrace_failed(const char *what, const char *stderr_path, Error *err) {
  keep_err = 1;
  char *text = slurp_fd_file(stderr_path, 4000);
  if (text) clean_stderr(text);
  const char *msg = text && *text ? text : "(no message)";
  int rc;
  if (is_permission_problem(msg))
    rc = error_set(err, ERR_CONFIG,
                   "eBPF is not permitted here (%s): bpftrace needs root with CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN, "
                   "and containers must allow bpf() and perf_event_open(): %s",
                   what, msg);
  else
    rc = error_set(err, ERR_CONFIG, "bpftrace failed (%s): %s", what, msg);
  free(text);
  return rc;
}

/* Runs argv with stdout/stderr to files; returns the exit status or -1. */
static pid_t spawn(char *const argv[], const char *out_path, const char *err_path) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (out_path) {
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1), close(fd);
  }
  if (err_path) {
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2), close(fd);
  }
  execvp(argv[0], argv);
  fprintf(stderr, "cannot run %s: %s\n", argv[0], error_errno_text(errno));
  _exit(127);
}

/* Forks argv's process held before its exec until a byte arrives on
 * *release (a pipe's write end, closed on exec so that bpftrace does not
 * keep it); returns its pid or -1. */
static pid_t spawn_held(char *const argv[], int *release) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]), close(p[1]);
    return -1;
  }
  if (pid == 0) {
    close(p[1]);
    char go;
    ssize_t got;
    do got = read(p[0], &go, 1);
    while (got < 0 && errno == EINTR);
    if (got != 1) _exit(127); /* the recording was abandoned */
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], error_errno_text(errno));
    _exit(127);
  }
  close(p[0]);
  *release = p[1];
  return pid;
}

static int status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

static int file_has(const char *path, const char *needle) {
  char *text = slurp_fd_file(path, 1 << 16);
  int found = text && strstr(text, needle) != NULL;
  free(text);
  return found;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Waits up to timeout_ms for pid; returns its status or -1 when still running. */
static int wait_for(pid_t pid, int timeout_ms) {
  for (int waited = 0;; waited += 20) {
    int status;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    if (got < 0 || waited >= timeout_ms) return -1;
    sleep_ms(20);
  }
}

int trace_ebpf_run(const TraceEbpfRun *opt, char *const argv[], int *command_status, long *lost, Error *err) {
  *command_status = -1;
  *lost = 0;
  keep_err = 0;
  char *bpftrace = which(opt->bpftrace ? opt->bpftrace : "bpftrace");
  if (!bpftrace)
    return error_set(err, ERR_CONFIG,
                     "bpftrace not found%s%s: install it (Debian package bpftrace; scripts/install-deps.sh lists it)",
                     opt->bpftrace ? " at " : " in PATH", opt->bpftrace ? opt->bpftrace : "");
  char *binary = which(opt->binary);
  if (!binary) {
    free(bpftrace);
    return error_set(err, ERR_ARG, "%s: no such executable (the binary whose probes to attach; see --binary)",
                     opt->binary);
  }
  int rc = trace_ebpf_prepare_tracefs(err);
  size_t plen = strlen(opt->raw_path);
  char *script_path = malloc(plen + 8), *err_path = malloc(plen + 8), *list_path = malloc(plen + 8);
  char *script = NULL;
  if (rc == ERR_OK && (!script_path || !err_path || !list_path)) rc = error_set(err, ERR_NOMEM, "out of memory");
  if (rc == ERR_OK) {
    snprintf(script_path, plen + 8, "%s.bt", opt->raw_path);
    snprintf(err_path, plen + 8, "%s.err", opt->raw_path);
    snprintf(list_path, plen + 8, "%s.lst", opt->raw_path);
  }
  /* The binary must carry the probes. */
  if (rc == ERR_OK) {
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "usdt:%s:fivefold:*", binary);
    char *list_argv[] = {bpftrace, "-l", pattern, NULL};
    pid_t pid = spawn(list_argv, list_path, err_path);
    int status = pid > 0 ? wait_for(pid, 60000) : -1;
    if (status == -1) rc = error_set(err, ERR_CONFIG, "bpftrace -l did not finish");
    else if (!file_has(list_path, "fivefold:action_begin"))
      rc = status_code(status) != 0 ? bpftrace_failed("listing the probes", err_path, err)
                                    : error_set(err, ERR_CONFIG,
                                                "%s has no fivefold USDT probes: build it with <sys/sdt.h> available "
                                                "(Debian package systemtap-sdt-dev), or pass --binary with the "
                                                "program the command runs",
                                                binary);
  }
  /* The command is forked now, held until the probes are attached, so
   * that the script can keep only its processes (trace_ebpf_script). */
  int release = -1;
  pid_t cmd = -1;
  if (rc == ERR_OK && (cmd = spawn_held(argv, &release)) < 0)
    rc = error_set(err, ERR_CONFIG, "cannot start %s: %s", argv[0], error_errno_text(errno));
  if (rc == ERR_OK && !(script = trace_ebpf_script(binary, opt->with_sched, (int)cmd)))
    rc = error_set(err, ERR_NOMEM, "out of memory");
  if (rc == ERR_OK) {
    FILE *f = fopen(script_path, "w");
    if (!f || fputs(script, f) < 0) rc = error_set(err, ERR_IO, "cannot write %s: %s", script_path, error_errno_text(errno));
    if (f) fclose(f);
  }
  pid_t tracer = -1;
  if (rc == ERR_OK) {
    /* -B none: every line reaches the file at once (the readiness mark
     * first); a larger perf ring loses fewer events in bursts. */
    setenv("BPFTRACE_PERF_RB_PAGES", "1024", 0);
    char *bt_argv[] = {bpftrace, "-B", "none", script_path, NULL};
    /* Empty before bpftrace starts, so that a readiness mark left by an
     * earlier recording into the same file is never taken for this one's. */
    FILE *stale = fopen(opt->raw_path, "w");
    if (stale) fclose(stale);
    tracer = spawn(bt_argv, opt->raw_path, err_path);
    if (tracer < 0) rc = error_set(err, ERR_CONFIG, "cannot start bpftrace: %s", error_errno_text(errno));
  }
  int timeout_ms = (int)((opt->attach_timeout_s > 0 ? opt->attach_timeout_s : 60) * 1000);
  for (int waited = 0; rc == ERR_OK && !file_has(opt->raw_path, READY_MARK); waited += 20) {
    int status = wait_for(tracer, 0);
    if (status != -1) {
      tracer = -1;
      rc = bpftrace_failed("attaching the probes", err_path, err);
    } else if (waited >= timeout_ms) {
      rc = error_set(err, ERR_CONFIG, "bpftrace did not attach its probes within %d s", timeout_ms / 1000);
    } else {
      sleep_ms(20);
    }
  }
  if (cmd > 0) {
    int status;
    /* Released only once the probes are attached; otherwise it never runs. */
    if (rc != ERR_OK || write(release, "g", 1) != 1) kill(cmd, SIGKILL);
    close(release);
    if (waitpid(cmd, &status, 0) == cmd && rc == ERR_OK) *command_status = status_code(status);
  }
  if (tracer > 0) {
    kill(tracer, SIGINT);
    int status = wait_for(tracer, 30000);
    if (status == -1) {
      kill(tracer, SIGKILL);
      waitpid(tracer, &status, 0);
    }
    char *text = slurp_fd_file(err_path, 1 << 16);
    for (const char *p = text; p && (p = strstr(p, "Lost ")); p += 5) *lost += strtol(p + 5, NULL, 10);
    free(text);
  }
  if (list_path) remove(list_path);
  if (script_path) remove(script_path);
  if (!keep_err && err_path) remove(err_path);
  free(script);
  free(script_path);
  free(err_path);
  free(list_path);
  free(binary);
  free(bpftrace);
  return rc;
}
