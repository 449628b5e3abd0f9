# Fuzz tests (label "fuzz") of every reader of user files: libFuzzer
# harnesses tests/fuzz/fuzz_<reader>.c, each replaying its seed corpus
# tests/fuzz/corpus/<reader>/ and then a fixed number of inputs mutated from
# a fixed seed with tests/fuzz/<reader>.dict, so that the gate's verdict is
# the same on every machine whatever its speed. Time-bounded fuzzing (a
# search, not a gate) is the `fuzz` target (`make fuzz`), never a test.
#
# The harnesses need clang (-fsanitize=fuzzer) while the project builds with
# gcc, so they are compiled and linked by custom commands: the harness and
# the reader sources it names are compiled by clang with coverage, ASan and
# UBSan, and whatever else those sources call is taken from the gcc-built
# fivefold_* archives (the linker pulls only the members it needs; a symbol
# the instrumented objects define is never pulled twice). So a reader that
# starts calling another module keeps linking, and only the code under test
# pays for instrumentation.
#
# Registered only when clang can build and run a fuzzer, and only in the
# non-sanitizer build: the harnesses carry their own sanitizers, so the
# Debug+ASan pass of `make test` would run the same thing twice. Shared
# libraries (cJSON, OpenBLAS, MPI, the OpenMP runtime) are linked as needed:
# a harness whose code never reaches MPI does not load it.
option(FIVEFOLD_FUZZ "Build and register the libFuzzer tests of tests/fuzz (needs clang with libFuzzer)" ON)
set(FIVEFOLD_FUZZ_RUNS_SCALE 1 CACHE STRING "Multiplier of each fuzz test's fixed input count under ctest")
set(FIVEFOLD_FUZZ_SECONDS 60 CACHE STRING "Seconds each harness runs under the time-bounded `fuzz` target")

# What was left unregistered for want of a dependency goes to
# untested-layers/fuzz.txt, which the end of `make test` reports
# (scripts/test_summary.sh; a failure under CI=true). Switching the tests
# off on purpose (FIVEFOLD_FUZZ=OFF, the sanitizer build) is not reported.
set(FUZZ_UNTESTED_FILE ${CMAKE_BINARY_DIR}/untested-layers/fuzz.txt)
file(WRITE ${FUZZ_UNTESTED_FILE} "")
if(NOT FIVEFOLD_FUZZ)
  message(STATUS "fuzz: tests/fuzz disabled (FIVEFOLD_FUZZ=OFF)")
  return()
endif()
if(FIVEFOLD_SANITIZE)
  message(STATUS "fuzz: tests/fuzz not registered in the sanitizer build (the harnesses have their own ASan/UBSan)")
  return()
endif()

if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(FIVEFOLD_FUZZ_CC_HINT ${CMAKE_C_COMPILER})
endif()
find_program(FIVEFOLD_FUZZ_CC NAMES ${FIVEFOLD_FUZZ_CC_HINT} clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14
             DOC "clang used to build the libFuzzer harnesses of tests/fuzz")

set(FUZZ_SRC_DIR ${CMAKE_CURRENT_LIST_DIR})
set(FUZZ_BIN_DIR ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
set(FUZZ_SANITIZE -fsanitize=address,undefined -fno-sanitize-recover=undefined)
set(FUZZ_CFLAGS -std=gnu11 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link ${FUZZ_SANITIZE}
    -I${CMAKE_SOURCE_DIR}/src ${CJSON_CFLAGS})

# Can this clang build and run a fuzzer? Checked once per compiler (cached).
if(FIVEFOLD_FUZZ_CC AND NOT FIVEFOLD_FUZZ_CC_CHECKED STREQUAL FIVEFOLD_FUZZ_CC)
  set(check_dir ${FUZZ_BIN_DIR}/check)
  file(MAKE_DIRECTORY ${check_dir})
  file(WRITE ${check_dir}/check.c
       "#include <stddef.h>\n#include <stdint.h>\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${FIVEFOLD_FUZZ_CC} -fsanitize=fuzzer ${FUZZ_SANITIZE} check.c -o check
                  WORKING_DIRECTORY ${check_dir} RESULT_VARIABLE build_rc OUTPUT_QUIET ERROR_QUIET)
  set(run_rc 1)
  if(build_rc EQUAL 0)
    execute_process(COMMAND ${check_dir}/check -runs=100 -seed=1 WORKING_DIRECTORY ${check_dir}
                    RESULT_VARIABLE run_rc OUTPUT_QUIET ERROR_QUIET)
  endif()
  if(run_rc EQUAL 0)
    set(FIVEFOLD_FUZZ_CC_WORKS ON CACHE INTERNAL "")
  else()
    set(FIVEFOLD_FUZZ_CC_WORKS OFF CACHE INTERNAL "")
  endif()
  set(FIVEFOLD_FUZZ_CC_CHECKED ${FIVEFOLD_FUZZ_CC} CACHE INTERNAL "")
endif()
if(NOT FIVEFOLD_FUZZ_CC OR NOT FIVEFOLD_FUZZ_CC_WORKS)
  message(WARNING "fuzz: no clang with libFuzzer (-fsanitize=fuzzer) found: the fuzz tests are not registered "
                  "(install clang and libclang-rt-dev: scripts/install-deps.sh)")
  file(WRITE ${FUZZ_UNTESTED_FILE}
       "fuzz.* (the libFuzzer tests of every file reader): no clang with libFuzzer "
       "(missing dependency: clang libclang-rt-dev)\n")
  return()
endif()
message(STATUS "fuzz: libFuzzer harnesses built with ${FIVEFOLD_FUZZ_CC}; tests replay the seeds plus a fixed "
               "number of inputs, `make fuzz` runs ${FIVEFOLD_FUZZ_SECONDS} s per harness")

# The gcc-built archives the instrumented objects may call into: fivefold_train
# and everything it links, in one group so their order does not matter.
set(FUZZ_ARCHIVES "")
set(FUZZ_EXTRA_LIBS "")
set(queue fivefold_train)
while(queue)
  list(POP_FRONT queue lib)
  if(lib IN_LIST FUZZ_ARCHIVES)
    continue()
  endif()
  list(APPEND FUZZ_ARCHIVES ${lib})
  string(REGEX REPLACE "^fivefold_" "" mod ${lib})
  foreach(dep ${FIVEFOLD_DEPS_${mod}})
    if(dep MATCHES "^fivefold_")
      list(APPEND queue ${dep})
    endif()
  endforeach()
endwhile()
if(fivefold_comm IN_LIST FUZZ_ARCHIVES)
  list(APPEND FUZZ_EXTRA_LIBS ${MPI_C_LIBRARIES})
endif()
foreach(lib ${OpenMP_C_LIB_NAMES})
  list(APPEND FUZZ_EXTRA_LIBS ${OpenMP_${lib}_LIBRARY})
endforeach()
set(FUZZ_ARCHIVE_FILES "")
foreach(lib ${FUZZ_ARCHIVES})
  list(APPEND FUZZ_ARCHIVE_FILES $<TARGET_FILE:${lib}>)
endforeach()

# One instrumented object per source file and harness (a few small files are
# compiled twice; sharing objects between targets would race in parallel
# builds). Header dependencies come from clang's depfile. Project sources do
# not get -Werror (gcc's build owns their warnings; a clang-only one must not
# break the build), the harnesses do.
function(fuzz_object reader src werror out_var)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${src})
  set(obj ${FUZZ_BIN_DIR}/obj/${reader}/${rel}.o)
  get_filename_component(obj_dir ${obj} DIRECTORY)
  file(MAKE_DIRECTORY ${obj_dir})
  set(warn -Wall -Wextra)
  if(werror)
    list(APPEND warn -Werror)
  endif()
  add_custom_command(OUTPUT ${obj}
                     COMMAND ${FIVEFOLD_FUZZ_CC} ${FUZZ_CFLAGS} ${warn} -MD -MF ${obj}.d -c ${src} -o ${obj}
                     DEPENDS ${src} DEPFILE ${obj}.d
                     COMMENT "fuzz: compiling ${rel} for fuzz_${reader}" VERBATIM)
  set(${out_var} ${obj} PARENT_SCOPE)
endfunction()

# fuzz_harness(reader RUNS SOURCES...): tests/fuzz/fuzz_<reader>.c plus the
# named reader sources (paths under src/), instrumented; test fuzz.<reader>
# replays the seeds and then RUNS mutated inputs (counts chosen to take
# about 5 to 10 s each on 2 idle shared cores; the count, not the time, is
# fixed).
add_custom_target(fuzz COMMENT "fuzz: time-bounded fuzzing of every reader (${FIVEFOLD_FUZZ_SECONDS} s each)")
function(fuzz_harness reader runs)
  fuzz_object(${reader} ${FUZZ_SRC_DIR}/fuzz_${reader}.c ON harness_obj)
  set(objs ${harness_obj})
  foreach(src ${ARGN})
    fuzz_object(${reader} ${CMAKE_SOURCE_DIR}/src/${src} OFF obj)
    list(APPEND objs ${obj})
  endforeach()
  set(exe ${FUZZ_BIN_DIR}/fuzz_${reader})
  add_custom_command(OUTPUT ${exe}
                     COMMAND ${FIVEFOLD_FUZZ_CC} -fsanitize=fuzzer ${FUZZ_SANITIZE} ${objs}
                             -Wl,--start-group ${FUZZ_ARCHIVE_FILES} -Wl,--end-group -Wl,--as-needed
                             ${CJSON_LINK_LIBRARIES} ${OPENBLAS_LIB} ${DNNL_LIB} ${PNG_LIBRARIES} ${JPEG_LIBRARIES}
                             ${FUZZ_EXTRA_LIBS} -lz -lm -lpthread -o ${exe}
                     DEPENDS ${objs} ${FUZZ_ARCHIVES}
                     COMMENT "fuzz: linking fuzz_${reader}" VERBATIM)
  add_custom_target(fuzz_${reader} ALL DEPENDS ${exe})
  math(EXPR runs "${runs} * ${FIVEFOLD_FUZZ_RUNS_SCALE}")
  add_test(NAME fuzz.${reader}
           COMMAND bash ${FUZZ_SRC_DIR}/run_fuzz.sh ${exe} ${FUZZ_SRC_DIR}/corpus/${reader}
                   ${FUZZ_SRC_DIR}/${reader}.dict ${FUZZ_BIN_DIR}/run/${reader} runs ${runs})
  set_tests_properties(fuzz.${reader} PROPERTIES LABELS fuzz TIMEOUT 600
                       ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
  add_custom_command(TARGET fuzz POST_BUILD
                     COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
                             bash ${FUZZ_SRC_DIR}/run_fuzz.sh ${exe} ${FUZZ_SRC_DIR}/corpus/${reader}
                             ${FUZZ_SRC_DIR}/${reader}.dict ${FUZZ_BIN_DIR}/long/${reader} seconds
                             ${FIVEFOLD_FUZZ_SECONDS}
                     VERBATIM)
  add_dependencies(fuzz fuzz_${reader})
endfunction()

fuzz_harness(model_config 20000 model/config.c base/error.c)
fuzz_harness(train_config 20000 train/train_config.c model/config.c base/error.c)
fuzz_harness(tokenizer 20000 tok/tok_json.c tok/tokenizer.c tok/bpe_encode.c tok/pretok.c base/error.c)
fuzz_harness(safetensors 100000 base/safetensors.c base/error.c)
fuzz_harness(token_shard 100000 data/token_shard.c data/data_loader.c base/error.c)
fuzz_harness(image 100000 base/image_io.c base/error.c)
fuzz_harness(npy 100000 base/npy.c base/error.c)
# The gate itself: two runs with the gate's bounds try the same inputs.
add_test(NAME fuzz.reproducible
         COMMAND bash ${FUZZ_SRC_DIR}/reproducible_test.sh ${FUZZ_BIN_DIR}/fuzz_model_config
                 ${FUZZ_SRC_DIR}/corpus/model_config ${FUZZ_SRC_DIR}/model_config.dict
                 ${FUZZ_BIN_DIR}/reproducible runs 5000)
set_tests_properties(fuzz.reproducible PROPERTIES LABELS fuzz TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMP_NUM_THREADS=1;OMP_WAIT_POLICY=PASSIVE")
if(EXISTS ${CMAKE_SOURCE_DIR}/src/ckpt/checkpoint_read.c)
  fuzz_harness(checkpoint 10000 ckpt/checkpoint_read.c model/config.c base/error.c)
endif()
