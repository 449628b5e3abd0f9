# Scripted train tests: the CLI checks (help texts, config errors, a tiny
# tokenize + train round trip), and the learning test on real text, which is
# slow (skipped by the sanitizer pass and `make test-fast`).
add_test(NAME train.cli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli_test.sh $<TARGET_FILE:fivefold>)
set_tests_properties(train.cli PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 300)
if(TEST train.learn_bible)
  set_tests_properties(train.learn_bible PROPERTIES LABELS slow TIMEOUT 300)
endif()
# Checkpoint and resume end to end: a run killed with SIGKILL (or dying while
# writing a checkpoint) and resumed matches an uninterrupted run bit for bit.
add_test(NAME train.resume COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/resume_test.sh $<TARGET_FILE:fivefold>)
set_tests_properties(train.resume PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 300)
# Distributed checkpoints (MPI-IO) under mpirun.
include(${CMAKE_CURRENT_LIST_DIR}/ckpt_dist.cmake)
# Parameter groups in phases: its data-parallel buckets need the one-rank
# MPI world, whose allocations Open MPI never frees (tests/comm/lsan.supp).
set_tests_properties(train.param_groups PROPERTIES ENVIRONMENT
                     "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/../comm/lsan.supp:fast_unwind_on_malloc=0")
# The fused elementwise kernels switched off and on, and applied from a plan:
# bit-identical training (tests/train/fusion_test.sh).
add_test(NAME train.fusion COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fusion_test.sh $<TARGET_FILE:fivefold>)
set_tests_properties(train.fusion PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE" TIMEOUT 300)
