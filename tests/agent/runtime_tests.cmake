# Unit tests of the agent runtime (fakes, no sleeps) and process tests that
# run the real ddprun binary on small workers in data/.
find_package(nlohmann_json REQUIRED)

add_executable(agent_runtime_test
  ${CMAKE_CURRENT_LIST_DIR}/elastic_agent_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/failure_report_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/interruptible_rendezvous_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/line_splitter_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/local_rendezvous_client_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/torch_version_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_env_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_watchdog_test.cc
)
target_link_libraries(agent_runtime_test PRIVATE
  ddprun_agent ddprun_catch_main nlohmann_json::nlohmann_json)
target_compile_definitions(agent_runtime_test PRIVATE ${DDPRUN_TEST_DEFINES})
catch_discover_tests(agent_runtime_test TEST_PREFIX "agent/")

if(TARGET ddprun)
  add_executable(agent_process_test
    ${CMAKE_CURRENT_LIST_DIR}/ddprun_process_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/frontends_process_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/torch_version_process_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/job_endings_test.cc)
  target_link_libraries(agent_process_test PRIVATE
    ddprun_common ddprun_catch_main)
  target_compile_definitions(agent_process_test PRIVATE ${DDPRUN_TEST_DEFINES})
  add_dependencies(agent_process_test ddprun)
  catch_discover_tests(agent_process_test TEST_PREFIX "agent/"
    PROPERTIES TIMEOUT 60)
endif()

# The deepspeed and accelerate front ends: command lines, resource and
# config handling, the environment they give workers (no processes).
if(TARGET ddprun_frontends)
  add_executable(frontends_test
    ${CMAKE_CURRENT_LIST_DIR}/accelerate_cli_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/deepspeed_cli_test.cc)
  target_link_libraries(frontends_test PRIVATE ddprun_frontends
                                               ddprun_catch_main)
  catch_discover_tests(frontends_test TEST_PREFIX "agent/")
endif()
