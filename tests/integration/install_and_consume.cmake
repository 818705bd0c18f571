# Installs gpipe into a scratch prefix and, as a user's code would, builds and
# runs against it: apps/examples with find_package(gpipe) (C++); a CXX-only
# project (consumer_cxx) that compiles every installed header on its own and
# trains with gpipe::Pipeline / gpipe::fit; a C-only project (consumer_c) and
# a Fortran-only one (consumer_fortran, gpipe::fortran); and the C API test
# program with
#     mpicc c_header_check.c $(pkg-config --cflags --libs gpipe)
# cmake -DGPIPE_BUILD_DIR=... -DGPIPE_SOURCE_DIR=... -DWORK_DIR=...
#       [-DGPIPE_FORTRAN=ON -DMPI_C_COMPILER=mpicc -DPKG_CONFIG=pkg-config] -P install_and_consume.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(passed 0)

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message("${out}")
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

# Runs a consumer program; its output must match `pattern`.
function(run_consumer what pattern program)
  run(${program})
  if(NOT run_output MATCHES "${pattern}")
    message(FATAL_ERROR "the ${what} consumer failed:\n${run_output}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${GPIPE_BUILD_DIR} --prefix ${prefix})
set(expected include/gpipe/gpipe.h include/gpipe/config.hpp include/gpipe/pipeline/cell.hpp
    include/gpipe/pipeline/buffer_plan.hpp include/gpipe/model/layer_seconds.hpp
    lib/cmake/gpipe/gpipeConfig.cmake bin/gpipe-train bin/gpipe-infer lib/pkgconfig/gpipe.pc
    share/gpipe-kokkos/inputs/fashion_mnist_mlp.yaml share/gpipe-kokkos/docs/file-formats.md
    share/gpipe-kokkos/scripts/plot_scaling.py share/gpipe-kokkos/README.md)
if(GPIPE_FORTRAN)
  list(APPEND expected include/gpipe/fortran/gpipe.mod)
endif()
foreach(f IN LISTS expected)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
math(EXPR passed "${passed} + 1")

# C++: find_package(gpipe), gpipe::gpipe.
run(${CMAKE_COMMAND} -S ${GPIPE_SOURCE_DIR}/apps/examples -B ${WORK_DIR}/build
    -DCMAKE_BUILD_TYPE=Release -Dgpipe_ROOT=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build -j2)
run(${WORK_DIR}/build/heat_surrogate --steps 1500 --max-error 0.2)
math(EXPR passed "${passed} + 1")

# C++ only (project(x CXX)): every installed header on its own, and a
# Pipeline trained with gpipe::fit.
run(${CMAKE_COMMAND} -S ${GPIPE_SOURCE_DIR}/tests/integration/consumer_cxx -B ${WORK_DIR}/build-cxx
    -DCMAKE_BUILD_TYPE=Release -Dgpipe_ROOT=${prefix})
if(NOT run_output MATCHES "compiling ([0-9]+) installed headers on their own")
  message(FATAL_ERROR "the CXX-only consumer did not list the installed headers:\n${run_output}")
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build-cxx -j2)
run_consumer(C++ "C\\+\\+ consumer: passed" ${WORK_DIR}/build-cxx/cxx_consumer)
math(EXPR passed "${passed} + 1")

# C only (project(x C)) through CMake: the C API test program.
run(${CMAKE_COMMAND} -S ${GPIPE_SOURCE_DIR}/tests/integration/consumer_c -B ${WORK_DIR}/build-c
    -DCMAKE_BUILD_TYPE=Release -Dgpipe_ROOT=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build-c)
run_consumer(C "4 passed, 0 failed" ${WORK_DIR}/build-c/c_consumer)
math(EXPR passed "${passed} + 1")

# Fortran (project(x Fortran)): find_package(gpipe COMPONENTS fortran), gpipe::fortran.
if(GPIPE_FORTRAN)
  run(${CMAKE_COMMAND} -S ${GPIPE_SOURCE_DIR}/tests/integration/consumer_fortran
      -B ${WORK_DIR}/build-fortran -DCMAKE_BUILD_TYPE=Release -Dgpipe_ROOT=${prefix})
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/build-fortran)
  run_consumer(Fortran " passed, 0 failed" ${WORK_DIR}/build-fortran/fortran_consumer)
  math(EXPR passed "${passed} + 1")
else()
  message("skipped: the Fortran consumer (gpipe was built without Fortran)")
endif()

# C with pkg-config and the MPI compiler wrapper, as the README shows.
if(PKG_CONFIG AND MPI_C_COMPILER)
  set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
  run(${PKG_CONFIG} --cflags --libs gpipe)
  separate_arguments(flags UNIX_COMMAND "${run_output}")
  run(${MPI_C_COMPILER} ${GPIPE_SOURCE_DIR}/tests/capi/c_header_check.c ${flags}
      -o ${WORK_DIR}/c_consumer)
  run_consumer(pkg-config "4 passed, 0 failed" ${WORK_DIR}/c_consumer)
  math(EXPR passed "${passed} + 1")
else()
  message("skipped: the pkg-config consumer (no pkg-config or no MPI C compiler wrapper)")
endif()
message("${passed} passed, 0 failed")
