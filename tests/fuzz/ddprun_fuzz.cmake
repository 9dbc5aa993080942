# Fuzz targets (tests/fuzz/README.md). Each target is one source file that
# defines LLVMFuzzerTestOneInput and checks its own invariants (abort() on a
# violation); this registers, for every target NAME:
#  - <NAME>_fuzz_replay: the target with the gcc-buildable replay driver
#    (fuzz_replay_main.cc), in ctest as fuzz/<NAME> (label fuzz, a few
#    seconds over tests/fuzz/corpus/<NAME>/ and mutations of it);
#  - <NAME>_fuzzer: the coverage-guided libFuzzer binary, built when the
#    compiler is Clang (DDPRUN_BUILD_FUZZ). A GCC build gets them from a
#    Clang build of its own (<build>/fuzz-clang), which fuzz/libfuzzer makes
#    and runs for every target that does not need LibTorch.
#
#   ddprun_fuzz_target(NAME n SOURCE file.cc LIBRARIES lib...
#                      [SEEDS seeds.cc] [TORCH] [REPLAY_SECONDS s])
#
# SEEDS: a source defining DdprunFuzzSeeds() (fuzz_seeds.h). TORCH: the
# target needs LibTorch (replayed in ctest, not part of the Clang build).
set(DDPRUN_FUZZ_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz)
set(DDPRUN_BUILD_FUZZ AUTO CACHE STRING
  "Build the libFuzzer binaries <name>_fuzzer (AUTO: with Clang)")
if(DDPRUN_BUILD_FUZZ STREQUAL "AUTO")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(DDPRUN_FUZZ_LIBFUZZER ON)
  else()
    set(DDPRUN_FUZZ_LIBFUZZER OFF)
  endif()
else()
  set(DDPRUN_FUZZ_LIBFUZZER ${DDPRUN_BUILD_FUZZ})
endif()

function(ddprun_fuzz_target)
  cmake_parse_arguments(arg "TORCH" "NAME;SOURCE;SEEDS;REPLAY_SECONDS"
    "LIBRARIES" ${ARGN})
  if(NOT arg_NAME OR NOT arg_SOURCE)
    message(FATAL_ERROR "ddprun_fuzz_target: NAME and SOURCE are required")
  endif()
  set(corpus ${DDPRUN_FUZZ_DIR}/corpus/${arg_NAME})
  if(NOT IS_DIRECTORY ${corpus})
    message(FATAL_ERROR "ddprun_fuzz_target(${arg_NAME}): no checked-in "
      "corpus at ${corpus}")
  endif()
  if(NOT arg_REPLAY_SECONDS)
    set(arg_REPLAY_SECONDS 5)
  endif()
  set(replay ${arg_NAME}_fuzz_replay)
  add_executable(${replay} ${DDPRUN_FUZZ_DIR}/fuzz_replay_main.cc
    ${arg_SOURCE} ${arg_SEEDS})
  target_include_directories(${replay} PRIVATE ${DDPRUN_FUZZ_DIR})
  target_link_libraries(${replay} PRIVATE ${arg_LIBRARIES})
  add_test(NAME fuzz/${arg_NAME}
    COMMAND ${replay} --seconds ${arg_REPLAY_SECONDS} ${corpus})
  set_tests_properties(fuzz/${arg_NAME} PROPERTIES LABELS fuzz TIMEOUT 120)
  if(DDPRUN_FUZZ_LIBFUZZER)
    set(fuzzer ${arg_NAME}_fuzzer)
    add_executable(${fuzzer} ${arg_SOURCE})
    target_include_directories(${fuzzer} PRIVATE ${DDPRUN_FUZZ_DIR})
    target_link_libraries(${fuzzer} PRIVATE ${arg_LIBRARIES})
    target_compile_options(${fuzzer} PRIVATE -fsanitize=fuzzer,address)
    target_link_options(${fuzzer} PRIVATE -fsanitize=fuzzer,address)
  endif()
  if(NOT arg_TORCH)
    set_property(GLOBAL APPEND PROPERTY DDPRUN_LIBFUZZER_TARGETS ${arg_NAME})
  endif()
endfunction()

# After every ddprun_fuzz_target(): one ctest case runs libFuzzer on each
# Torch-free target for DDPRUN_FUZZ_SECONDS (fuzz/libfuzzer), and with
# -DDDPRUN_SOAK=ON a soak case runs each for 60 s (fuzz/soak, label soak).
function(ddprun_fuzz_runs)
  get_property(names GLOBAL PROPERTY DDPRUN_LIBFUZZER_TARGETS)
  if(NOT names)
    return()
  endif()
  set(DDPRUN_FUZZ_SECONDS 5 CACHE STRING
    "Seconds of libFuzzer per target in fuzz/libfuzzer")
  set(run ${DDPRUN_FUZZ_DIR}/run_libfuzzer.sh)
  if(DDPRUN_FUZZ_LIBFUZZER)
    set(how --bin-dir ${CMAKE_BINARY_DIR}/bin)
  else()
    set(how --build ${CMAKE_COMMAND} ${PROJECT_SOURCE_DIR}
      ${CMAKE_BINARY_DIR}/fuzz-clang)
  endif()
  add_test(NAME fuzz/libfuzzer COMMAND ${run} ${how}
    --seconds ${DDPRUN_FUZZ_SECONDS} --corpus-root ${DDPRUN_FUZZ_DIR}/corpus
    ${names})
  set_tests_properties(fuzz/libfuzzer PROPERTIES LABELS fuzz TIMEOUT 1800
    SKIP_RETURN_CODE 77 RUN_SERIAL ON)
  if(DDPRUN_SOAK)
    add_test(NAME fuzz/soak COMMAND ${run} ${how}
      --seconds 60 --corpus-root ${DDPRUN_FUZZ_DIR}/corpus ${names})
    set_tests_properties(fuzz/soak PROPERTIES LABELS soak TIMEOUT 7200
      SKIP_RETURN_CODE 77 RUN_SERIAL ON)
  endif()
endfunction()
