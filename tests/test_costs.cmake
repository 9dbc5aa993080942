# ddprun_apply_test_costs(<tests>): sets ctest's COST of each test in the
# list that tests/test_costs.txt names (seconds measured in a full run;
# scripts/test_costs.py writes the file), so ctest starts the longest tests
# first. A test the file does not name keeps COST 0 and starts after them.
#
# Used twice: at configure time for the tests add_test() declares
# (ddprun_cost_directory_tests() in tests/CMakeLists.txt), and at ctest time
# for the tests Catch's discovery declares (an include after its own; a
# configure step cannot see those names). The file is read once per
# process.
set_property(GLOBAL PROPERTY DDPRUN_TEST_COSTS_FILE
             "${CMAKE_CURRENT_LIST_DIR}/test_costs.txt")
function(ddprun_apply_test_costs tests)
  get_property(read GLOBAL PROPERTY DDPRUN_TEST_COSTS_READ)
  if(NOT read)
    get_property(table GLOBAL PROPERTY DDPRUN_TEST_COSTS_FILE)
    file(STRINGS "${table}" lines REGEX "^[0-9]")
    foreach(line IN LISTS lines)
      string(FIND "${line}" "\t" tab)
      string(SUBSTRING "${line}" 0 ${tab} seconds)
      math(EXPR start "${tab} + 1")
      string(SUBSTRING "${line}" ${start} -1 name)
      set_property(GLOBAL PROPERTY "DDPRUN_TEST_COST:${name}" "${seconds}")
    endforeach()
    set_property(GLOBAL PROPERTY DDPRUN_TEST_COSTS_READ TRUE)
  endif()
  foreach(test IN LISTS tests)
    get_property(seconds GLOBAL PROPERTY "DDPRUN_TEST_COST:${test}")
    if(seconds)
      set_tests_properties("${test}" PROPERTIES COST "${seconds}")
    endif()
  endforeach()
endfunction()
