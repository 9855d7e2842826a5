# Writes OUT (a header) with the source tree's git commit and whether it has uncommitted changes to
# tracked files. Run at every build (target dg_provenance), so JSON contexts name the commit that
# was built, not the one that was configured; OUT is rewritten only when its text changes, so an
# unchanged tree recompiles nothing.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
  set(commit "unknown")
endif()
if(status)
  set(dirty 1)
else()
  set(dirty 0)
endif()
set(text "#pragma once\n#define DRIFTGATE_GIT_COMMIT \"${commit}\"\n#define DRIFTGATE_GIT_DIRTY ${dirty}\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
