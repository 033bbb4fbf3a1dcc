# cmake -DSOURCE_DIR=... -DOUTPUT=... -P scripts/git_version.cmake
# Writes OUTPUT with the source tree's git commit and dirty flag. Run at every build, it
# rewrites the file only when they change, so an unchanged tree recompiles nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  set(commit "unknown (not a git checkout)")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE status ERROR_QUIET)
  if(status)
    string(APPEND commit "-dirty")
  endif()
endif()
set(content "#pragma once\n#define SIAMESE_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUTPUT}" "${content}")
endif()
