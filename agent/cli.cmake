# ddprun_agent_cli: torchrun's command line -> LaunchOptions, and the worker
# line prefix. No process, network or Torch dependencies (ddprun_rdzv_conf,
# the --rdzv_conf key table, is plain C++), so the tests link it alone.
add_library(ddprun_agent_cli STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cli_entrypoint.cc
  ${CMAKE_CURRENT_LIST_DIR}/cli_flags.cc
  ${CMAKE_CURRENT_LIST_DIR}/cli_help.cc
  ${CMAKE_CURRENT_LIST_DIR}/cli_parser.cc
  ${CMAKE_CURRENT_LIST_DIR}/cli_values.cc
  ${CMAKE_CURRENT_LIST_DIR}/file_util.cc
  ${CMAKE_CURRENT_LIST_DIR}/log_line_prefix.cc
  ${CMAKE_CURRENT_LIST_DIR}/nproc_resolver.cc
  ${CMAKE_CURRENT_LIST_DIR}/option_tokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/slurm_env.cc
  ${CMAKE_CURRENT_LIST_DIR}/torch_version.cc
)
target_link_libraries(ddprun_agent_cli PUBLIC ddprun_common ddprun_rdzv_conf)
set_target_properties(ddprun_agent_cli PROPERTIES POSITION_INDEPENDENT_CODE ON)
