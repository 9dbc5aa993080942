# Unit tests of the command-line parser (agent/cli*.cc, agent/slurm_env.cc)
# and the worker line prefix (agent/log_line_prefix.cc). No processes.
add_executable(cli_parser_test ${CMAKE_CURRENT_LIST_DIR}/cli_parser_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/log_line_prefix_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/slurm_env_test.cc)
target_link_libraries(cli_parser_test PRIVATE ddprun_agent_cli
                                              ddprun_catch_main)
catch_discover_tests(cli_parser_test TEST_PREFIX "agent/")
