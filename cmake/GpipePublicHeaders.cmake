# gpipe_check_public_headers(DIR HEADERS): stops the configuration when the
# list of public headers (GPIPE_PUBLIC_HEADERS, relative to DIR =
# include/gpipe) is incomplete, naming each missing header:
#  - a header under DIR (*.hpp, *.h) that is not listed (it would not be installed), or
#  - a header included by a listed one ("gpipe/X") that is not listed and
#    not generated (config.hpp): the installed header would not compile.
# Every header under include/gpipe is public: private headers live in src/.
function(gpipe_check_public_headers dir headers)
  set(missing "")
  set(rerun CONFIGURE_DEPENDS)  # a header added later re-runs the check (not in cmake -P)
  if(CMAKE_SCRIPT_MODE_FILE)
    set(rerun "")
  endif()
  file(GLOB_RECURSE on_disk RELATIVE ${dir} ${rerun} ${dir}/*.hpp ${dir}/*.h)
  foreach(header IN LISTS on_disk)
    if(NOT header IN_LIST headers)
      list(APPEND missing "${header} (under include/gpipe, not listed)")
    endif()
  endforeach()
  foreach(header IN LISTS headers)
    if(NOT EXISTS ${dir}/${header})
      list(APPEND missing "${header} (listed, but no such file)")
      continue()
    endif()
    file(STRINGS ${dir}/${header} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]gpipe/")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]gpipe/([^>\"]+)[>\"].*" "\\1" included "${line}")
      if(NOT included IN_LIST headers AND NOT included STREQUAL "config.hpp")
        list(APPEND missing "${included} (included by ${header}, not listed)")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES missing)
  if(missing)
    list(JOIN missing "\n  " text)
    message(FATAL_ERROR "gpipe: GPIPE_PUBLIC_HEADERS (CMakeLists.txt) is incomplete; add:\n  ${text}")
  endif()
endfunction()
