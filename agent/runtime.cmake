# ddprun_agent: worker environment, supervision (Boost.Process + Asio), logs,
# failure reports, the elastic loop and the single-node rendezvous; and the
# `ddprun` executable with its `ddprun-launch` (torch.distributed.launch)
# alias, which links the gRPC rendezvous (client and embeddable server). No
# LibTorch.
find_package(Boost REQUIRED COMPONENTS filesystem)
find_package(nlohmann_json REQUIRED)

add_library(ddprun_agent STATIC
  ${CMAKE_CURRENT_LIST_DIR}/asio_event_loop.cc
  ${CMAKE_CURRENT_LIST_DIR}/boost_process_launcher.cc
  ${CMAKE_CURRENT_LIST_DIR}/console.cc
  ${CMAKE_CURRENT_LIST_DIR}/elastic_agent.cc
  ${CMAKE_CURRENT_LIST_DIR}/elf_deps.cc
  ${CMAKE_CURRENT_LIST_DIR}/failure_report.cc
  ${CMAKE_CURRENT_LIST_DIR}/interruptible_rendezvous.cc
  ${CMAKE_CURRENT_LIST_DIR}/line_splitter.cc
  ${CMAKE_CURRENT_LIST_DIR}/local_rendezvous_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/log_dir.cc
  ${CMAKE_CURRENT_LIST_DIR}/python_sys_path.cc
  ${CMAKE_CURRENT_LIST_DIR}/run_capture.cc
  ${CMAKE_CURRENT_LIST_DIR}/signal_names.cc
  ${CMAKE_CURRENT_LIST_DIR}/signal_watcher.cc
  ${CMAKE_CURRENT_LIST_DIR}/torch_version_probe.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_env.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_output.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_watchdog.cc
)
target_link_libraries(ddprun_agent
  PUBLIC ddprun_common ddprun_os ddprun_agent_cli Boost::headers
    Threads::Threads
  PRIVATE Boost::filesystem nlohmann_json::nlohmann_json)
set_target_properties(ddprun_agent PROPERTIES POSITION_INDEPENDENT_CODE ON)

if(TARGET ddprun_agent_cli)
  # The multi-node rendezvous (gRPC client, and the server an agent hosts
  # with is_host and static --node_rank 0). Still no LibTorch.
  add_library(ddprun_agent_rendezvous STATIC
    ${CMAKE_CURRENT_LIST_DIR}/rendezvous_factory.cc
    ${CMAKE_CURRENT_LIST_DIR}/rendezvous_host.cc)
  target_link_libraries(ddprun_agent_rendezvous
    PUBLIC ddprun_agent ddprun_rendezvous_client ddprun_rendezvous_server)
  # The other launchers' command lines on the same agent: `deepspeed`
  # (ddprun-deepspeed, with its ssh fan-out) and `accelerate launch`
  # (ddprun-accelerate). Still no LibTorch.
  find_package(yaml-cpp REQUIRED)
  add_library(ddprun_frontends STATIC
    ${CMAKE_CURRENT_LIST_DIR}/accelerate_args.cc
    ${CMAKE_CURRENT_LIST_DIR}/accelerate_cli.cc
    ${CMAKE_CURRENT_LIST_DIR}/accelerate_config.cc
    ${CMAKE_CURRENT_LIST_DIR}/accelerate_flags.cc
    ${CMAKE_CURRENT_LIST_DIR}/accelerate_main.cc
    ${CMAKE_CURRENT_LIST_DIR}/deepspeed_cli.cc
    ${CMAKE_CURRENT_LIST_DIR}/deepspeed_hosts.cc
    ${CMAKE_CURRENT_LIST_DIR}/deepspeed_main.cc
    ${CMAKE_CURRENT_LIST_DIR}/deepspeed_remote.cc
    ${CMAKE_CURRENT_LIST_DIR}/node_fanout.cc
    ${CMAKE_CURRENT_LIST_DIR}/py_value.cc
  )
  target_link_libraries(ddprun_frontends
    PUBLIC ddprun_agent ddprun_agent_cli ddprun_rendezvous_client
    PRIVATE nlohmann_json::nlohmann_json yaml-cpp)
  add_executable(ddprun ${CMAKE_CURRENT_LIST_DIR}/main.cc)
  target_link_libraries(ddprun PRIVATE ddprun_agent ddprun_agent_cli
    ddprun_agent_rendezvous ddprun_frontends)
  # main() checks argv[0]: ddprun-launch is the legacy
  # torch.distributed.launch, ddprun-accelerate `accelerate launch`,
  # ddprun-deepspeed the `deepspeed` launcher.
  foreach(alias ddprun-launch ddprun-accelerate ddprun-deepspeed)
    add_custom_command(TARGET ddprun POST_BUILD
      COMMAND ${CMAKE_COMMAND} -E create_symlink ddprun
              $<TARGET_FILE_DIR:ddprun>/${alias}
      VERBATIM)
    install(FILES $<TARGET_FILE_DIR:ddprun>/${alias} DESTINATION bin)
  endforeach()
  install(TARGETS ddprun RUNTIME DESTINATION bin)
else()
  message(WARNING "ddprun_agent_cli missing: the ddprun executable is skipped")
endif()
