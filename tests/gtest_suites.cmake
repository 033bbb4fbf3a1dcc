# cmake -DEXECUTABLE=... -DCTEST_FILE=... -DLABEL=... -DWORKING_DIRECTORY=... -DENVIRONMENT=...
#       [-DAVX2_ENVIRONMENT=...] -P tests/gtest_suites.cmake
# Run after a test executable is built: lists its tests and writes CTEST_FILE, which adds one
# ctest test per GoogleTest suite (`Suite` runs `--gtest_filter=Suite.*`). Suites named Gpu*
# are left out: tests/CMakeLists.txt registers those one test each, labelled gpu. A suite
# runs in one process, so LibTorch loads once per suite rather than once per test; the exit
# code 77 of tests/support/gtest_main.cpp (every test skipped) marks the suite skipped.
# With AVX2_ENVIRONMENT (variables separated by `|`), every suite runs a second time as
# `Suite@avx2`, labelled avx2, with those variables added: the kernel paths of a CPU without
# AVX-512 (tests/CMakeLists.txt says which).
execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${rc}):\n${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
function(add_suite name labels environment)
  string(APPEND content
    "add_test([=[${name}]=] [==[${EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
    "set_tests_properties([=[${name}]=] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIRECTORY}]==] "
    "LABELS [==[${labels}]==] ENVIRONMENT [==[${environment}]==] SKIP_RETURN_CODE 77)\n")
  set(content "${content}" PARENT_SCOPE)
endfunction()
foreach(line IN LISTS lines)
  # Suite lines start in the first column and end their name with a dot.
  if(line MATCHES "^([^ #][^ ]*)\\.( |$)")
    set(suite "${CMAKE_MATCH_1}")
    if(NOT suite MATCHES "^Gpu")
      add_suite("${suite}" "${LABEL}" "${ENVIRONMENT}")
      if(AVX2_ENVIRONMENT)
        string(REPLACE "|" ";" avx2 "${AVX2_ENVIRONMENT}")
        add_suite("${suite}@avx2" "${LABEL};avx2" "${ENVIRONMENT};${avx2}")
      endif()
    endif()
  endif()
endforeach()
file(WRITE "${CTEST_FILE}" "${content}")
