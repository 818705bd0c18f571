# Installs gpipe into a scratch prefix, builds apps/examples against it with
# find_package(gpipe) (as a user's code would), and runs the example.
# cmake -DGPIPE_BUILD_DIR=... -DGPIPE_SOURCE_DIR=... -DWORK_DIR=... -P install_and_consume.cmake
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()

run(${CMAKE_COMMAND} --install ${GPIPE_BUILD_DIR} --prefix ${prefix})
foreach(f include/gpipe/gpipe.h include/gpipe/config.hpp include/gpipe/pipeline/cell.hpp
          lib/cmake/gpipe/gpipeConfig.cmake bin/gpipe-train)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S ${GPIPE_SOURCE_DIR}/apps/examples -B ${WORK_DIR}/build
    -DCMAKE_BUILD_TYPE=Release -Dgpipe_ROOT=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build -j2)
run(${WORK_DIR}/build/heat_surrogate --steps 150 --max-error 0.3)
message("1 passed, 0 failed")
