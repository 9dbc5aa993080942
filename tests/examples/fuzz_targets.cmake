# Fuzz targets of the trainers' Torch-free file readers (examples/formats:
# CSV, JSON Lines, config files, NIfTI; tests/fuzz/README.md). Included by
# tests/examples/CMakeLists.txt, and by tests/CMakeLists.txt in a build
# without LibTorch (there examples/formats is built alone when
# -DDDPRUN_BUILD_FUZZ=ON, as tests/fuzz/run_libfuzzer.sh's Clang build
# passes).
if(TARGET ddprun_examples_formats)
  foreach(name csv_table jsonl yaml_config nifti)
    ddprun_fuzz_target(NAME ${name}
      SOURCE ${DDPRUN_FUZZ_DIR}/${name}_fuzz_target.cc
      LIBRARIES ddprun_examples_formats)
  endforeach()
endif()
