cmake_minimum_required(VERSION 3.20)
# gpipe_check_public_headers (cmake/GpipePublicHeaders.cmake) stops the
# configuration naming each header missing from GPIPE_PUBLIC_HEADERS: one
# included by a listed header, one on disk but unlisted; the real list passes.
#   cmake -DSOURCE_DIR=... -DHEADERS="a.hpp;b.hpp" -P public_headers_check.cmake
# With -DCHILD=1 it only runs the check on HEADERS (the test runs itself).
include(${SOURCE_DIR}/cmake/GpipePublicHeaders.cmake)
if(CHILD)
  gpipe_check_public_headers(${SOURCE_DIR}/include/gpipe "${HEADERS}")
  return()
endif()
set(passed 0)
function(check what headers expect_rc pattern)
  execute_process(COMMAND ${CMAKE_COMMAND} -DCHILD=1 -DSOURCE_DIR=${SOURCE_DIR} "-DHEADERS=${headers}"
                          -P ${CMAKE_CURRENT_LIST_FILE}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if((expect_rc EQUAL 0 AND NOT rc EQUAL 0) OR (NOT expect_rc EQUAL 0 AND rc EQUAL 0)
     OR NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: exit ${rc}, output:\n${out}${err}\nexpected /${pattern}/")
  endif()
  message("ok: ${what}")
endfunction()
check("the real list" "${HEADERS}" 0 "^$")
set(without ${HEADERS})
list(REMOVE_ITEM without pipeline/buffer_plan.hpp)
check("buffer_plan.hpp removed" "${without}" 1
      "incomplete; add:.*pipeline/buffer_plan.hpp \\(included by pipeline/stage.hpp, not listed\\)")
set(without ${HEADERS})
list(REMOVE_ITEM without predict/sweep.hpp)
check("predict/sweep.hpp removed" "${without}" 1 "predict/sweep.hpp \\(under include/gpipe, not listed\\)")
check("a listed header that does not exist" "${HEADERS};core/none.hpp" 1
      "core/none.hpp \\(listed, but no such file\\)")
message("4 passed, 0 failed")
