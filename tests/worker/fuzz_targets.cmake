# Fuzz targets of the worker's checkpoint reading (tests/fuzz/README.md).
# Included by tests/worker/CMakeLists.txt, and by tests/CMakeLists.txt in a
# build without LibTorch, where only the Torch-free container's exists.
ddprun_fuzz_target(NAME checkpoint_file
  SOURCE ${DDPRUN_FUZZ_DIR}/checkpoint_file_fuzz_target.cc
  LIBRARIES ddprun_checkpoint_file)
if(TARGET ddprun_worker)
  ddprun_fuzz_target(NAME checkpoint TORCH
    SOURCE ${DDPRUN_FUZZ_DIR}/checkpoint_fuzz_target.cc
    SEEDS ${DDPRUN_FUZZ_DIR}/checkpoint_fuzz_seeds.cc
    LIBRARIES ddprun_worker)
endif()
