/* Checks for the multi-rank test programs (run under mpirun, not cmocka).
 * A failed check prints the rank and location and is counted, but the
 * program carries on so that every rank keeps making the same sequence of
 * collective calls (stopping one rank early would turn a failure into a
 * hang). mpi_test_finish sums the failures over the world with raw MPI, not
 * with the wrappers under test, and gives the exit status. */
#ifndef FIVEFOLD_TESTS_COMM_MPI_TEST_UTIL_H
#define FIVEFOLD_TESTS_COMM_MPI_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"

static int mpi_test_failures;

#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "FAIL rank %d %s:%d: %s: ", comm_world_rank(), __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fputc('\n', stderr);                                                                       \
      mpi_test_failures++;                                                                       \
    }                                                                                            \
  } while (0)

/* A call that must succeed; its Error message is printed when it does not. */
#define CHECK_OK(call)                                                                  \
  do {                                                                                  \
    Error check_err_ = {0};                                                             \
    Error *err = &check_err_;                                                           \
    int check_rc_ = (call);                                                             \
    CHECK(check_rc_ == ERR_OK, "%s returned %d: %s", #call, check_rc_, check_err_.msg); \
  } while (0)

/* A call that must fail with code and a message containing needle. */
#define CHECK_FAILS(code, needle, call)                                                     \
  do {                                                                                      \
    Error check_err_ = {0};                                                                 \
    Error *err = &check_err_;                                                               \
    int check_rc_ = (call);                                                                 \
    CHECK(check_rc_ == (code) && strstr(check_err_.msg, needle),                            \
          "%s returned %d (%s), expected %d with \"%s\"", #call, check_rc_, check_err_.msg, \
          (code), needle);                                                                  \
  } while (0)

static int mpi_test_finish(const char *name) {
  int total = 0;
  MPI_Allreduce(&mpi_test_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (comm_world_rank() == 0) {
    if (total)
      fprintf(stderr, "%s: %d failed checks over %d ranks\n", name, total, comm_world_size());
    else
      printf("%s: all checks passed on %d ranks\n", name, comm_world_size());
  }
  Error err = {0};
  if (comm_finalize(&err)) {
    fprintf(stderr, "%s: %s\n", name, err.msg);
    return 1;
  }
  return total ? 1 : 0;
}

#endif
