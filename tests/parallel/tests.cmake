# Parallel training through `fivefold train` under mpirun (label
# "mpi"): the golden rule against one rank for a dense and an MoE model,
# ZeRO-1 checkpoints moving between runs, and a killed rank ending the job.
# Environment: mpirun refuses root without the OMPI_ALLOW variables (CI runs
# as root); one OpenMP thread per rank since up to 4 ranks share 2 cores;
# Open MPI's own allocations are not our leaks (tests/comm/lsan.supp).
set(PARALLEL_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
set(PARALLEL_MPI_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
foreach(mode golden-dense golden-moe resume kill)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.dp_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/dp_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.dp_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# Model parallelism (tests/parallel/mp_test.sh): TP, PP (1F1B, interleaved,
# uneven partition), TP x PP, TP x DP x PP, GPT-2 under TP2 / PP2 / DP2 /
# TP2 x PP2 against one rank; checkpoints
# moving from TP2 x PP2 to one rank and to ZeRO-1 DP4; layouts that do not
# fit the world refused.
foreach(mode golden-tp golden-pp golden-mixed golden-gpt2 reshard config)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.mp_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/mp_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.mp_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# Tracing and plan files through `fivefold train` (tests/parallel/trace_train_test.sh):
# --trace changes no result (one rank without MPI, PP2 x DP2), the trace of
# a PP2 x DP2 1F1B run has the DAG the program implies (checked by
# trace_mpi_pipeline check), --trace-steps windows, and --plan files.
foreach(mode same-1 same-pp dag steps plan)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.trace_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/trace_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE}
                   $<TARGET_FILE:trace_mpi_pipeline> ${mode})
  set_tests_properties(parallel.trace_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# `trace compare` prices a run of `train --plan` on the plan's device
# mapping, as `simulate --plan` does (tests/parallel/trace_mapping_test.sh:
# PP4 on 4 ranks of a 2-node spec, mapped and in rank order; --plan that
# disagrees with the trace refused).
add_test(NAME parallel.trace_mapping
         COMMAND bash ${PARALLEL_TEST_DIR}/trace_mapping_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.trace_mapping PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
# The program priced is the program trained (tests/parallel/trace_order_test.sh):
# the planner's zero-bubble plan for PP4 on 4 ranks, its order costs carried
# by the plan file, run by `train --plan` action for action as `simulate
# --plan` priced it, and priced so by `trace compare`; without a plan, the
# same flags build one program in both.
add_test(NAME parallel.trace_order
         COMMAND bash ${PARALLEL_TEST_DIR}/trace_order_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.trace_order PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
# MoE parallel folding and context parallelism (tests/parallel/fold_test.sh):
# EP, EP x ETP, TP attention folded onto EP, TP x CP attention with EP4 MoE,
# CP (dense, MoE), PP x EP, TP x PP x EP on 8 ranks and both dispatchers
# against one rank; an EP4 checkpoint resumed at EP2 x ETP2 and on one rank;
# layouts that do not fit the world or the model refused.
foreach(mode golden-ep golden-fold golden-pp golden-zero reshard config)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.fold_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/fold_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.fold_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# Stage replication (tests/parallel/stagerep_test.sh): per-stage widths 2,1,
# 1,2 and 2,2 against one rank, checkpoints moving to and from one rank, a
# plan file with stage_widths, and widths that do not fit refused.
foreach(mode golden resume config)
  add_test(NAME parallel.stagerep_${mode}
           COMMAND bash ${PARALLEL_TEST_DIR}/stagerep_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.stagerep_${mode} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# The planner's best plan on the local spec (calibrate --quick) is one the
# runtime trains, for several models (tests/parallel/plan_train_test.sh).
add_test(NAME parallel.plan_train
         COMMAND bash ${PARALLEL_TEST_DIR}/plan_train_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.plan_train PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
# Every kind of plan `fivefold plan` emits (schedules, warm-up depths,
# partitions, chunks, mapping, buckets, ZeRO-1, widths, recomputation) runs
# under `train --plan` or is refused naming the field
# (tests/parallel/plan_kinds_test.sh).
add_test(NAME parallel.plan_kinds
         COMMAND bash ${PARALLEL_TEST_DIR}/plan_kinds_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.plan_kinds PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
# The validation set does not depend on the layout (tests/parallel/eval_test.sh):
# one rank, DP2 with another micro-batch, TP2, PP2 and EP2 evaluate the same
# windows to the same loss.
add_test(NAME parallel.eval_fixed_windows
         COMMAND bash ${PARALLEL_TEST_DIR}/eval_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.eval_fixed_windows PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
# GEMM backends and bf16 (tests/parallel/precision_test.sh): every layout
# kind on the OpenBLAS backend against one rank; bf16 DP2, TP2, PP2, EP2
# against a bf16 rank, GPT-2 in bf16 against fp32 and TP2 against one rank; bf16 stop-and-resume bit for bit, and bf16 <-> fp32
# through one checkpoint; the bf16 weight cache on and off bit for bit (one
# rank, TP2, PP2, DP2, ZeRO-1, resume; a stale cache caught); a CNN and
# the deblurring GAN in bf16 against fp32, the CNN's DP2 in bf16 against
# one rank; --precision bf16 refused with oneDNN capped to AVX2 (a
# transformer, a CNN, the GAN). Exit 77: skipped on a CPU without
# avx512_bf16.
foreach(mode golden-openblas golden-bf16 resume-bf16 cache-bf16 nets-bf16 refuse-bf16)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.precision_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/precision_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.precision_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()

# The golden tests' loss rule itself (compare_runs.py): small aux and z
# losses are held to the relative tolerance, not to an absolute one.
add_test(NAME parallel.compare_rule COMMAND /usr/bin/python3 ${PARALLEL_TEST_DIR}/compare_runs_test.py)
set_tests_properties(parallel.compare_rule PROPERTIES TIMEOUT 60)
# Sleeping waits leave every number as it was (tests/parallel/waits_test.sh):
# PP2 x DP2 on 4 ranks and EP2 on 2 with FIVEFOLD_WAIT_SLEEP on, off and
# auto give identical checkpoints; the banner states the choice.
add_test(NAME parallel.waits_golden
         COMMAND bash ${PARALLEL_TEST_DIR}/waits_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.waits_golden PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
# Logs that read well in a file (tests/parallel/log_file_test.sh): no
# progress line in mpirun's redirected output, one with --progress always,
# dp in the banner's batch line, the warning for MFU above a stated peak.
add_test(NAME parallel.log_file
         COMMAND bash ${PARALLEL_TEST_DIR}/log_file_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.log_file PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
# Across a real network (tests/parallel/netns_test.sh): the emulated
# two-host cluster of scripts/netns-cluster.sh (network namespaces, a
# tbf-limited uplink, Open MPI's TCP between hosts, shared memory inside
# one): PP2 x DP2 matches one rank; the uplink going down mid-run ends the
# job naming the ranks that lost each other; a plan's device mapping places
# the ranks on the mapped hosts with the rank-order run's losses. Exit 77
# without root or network namespaces. placement-local: the mapping applied
# under plain mpirun (no cluster).
foreach(mode golden linkdown placement calibrate placement-local)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.netns_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/netns_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.netns_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# The zero-bubble H1 order (tests/parallel/zb_test.sh): zb-h1 on one rank,
# PP2 (dense, traced), and (golden-more) PP2 MoE, PP4, PP2 x DP2 with ZeRO-1,
# GPT-2 PP2 and warm-up depths against one rank.
foreach(mode golden-pp golden-more)
  string(REPLACE "-" "_" name ${mode})
  add_test(NAME parallel.zb_${name}
           COMMAND bash ${PARALLEL_TEST_DIR}/zb_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.zb_${name} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# Full activation recomputation (tests/parallel/recompute_test.sh): one rank
# bit-identical with and without it (dense, MoE, GPT-2, bf16, resume), PP2,
# TP2 and DP2 against one rank, more layouts (release_only), refusals.
foreach(mode one golden more config)
  add_test(NAME parallel.recompute_${mode}
           COMMAND bash ${PARALLEL_TEST_DIR}/recompute_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE} ${mode})
  set_tests_properties(parallel.recompute_${mode} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${PARALLEL_MPI_ENV}")
endforeach()
# Interleaved warm-up depths (tests/parallel/vpp_warmup_test.sh): PP2 x VPP2
# at depths other than Megatron-Core's 4,2 (3,2 and 6,3) against one rank;
# depths outside the bounds refused with the rank, depth and bound.
add_test(NAME parallel.vpp_warmup_golden
         COMMAND bash ${PARALLEL_TEST_DIR}/vpp_warmup_test.sh $<TARGET_FILE:fivefold> ${MPIEXEC_EXECUTABLE})
set_tests_properties(parallel.vpp_warmup_golden PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${PARALLEL_MPI_ENV}")
