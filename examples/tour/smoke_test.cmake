# The tour's smoke test: runs `tour` into a fresh folder, then checks that it succeeded, that
# all its checks held, and that every expected picture exists, is listed in index.md, and is
# a real picture (tour_check_png decodes it: size, colours, ink; a blank, truncated or
# single-colour file fails). Run by CTest as
#   cmake -DTOUR=<tour> -DCHECK=<tour_check_png> -DOUT=<folder> -DPICTURES=a,b,c -P smoke_test.cmake
# where PICTURES names the expected files without the .png suffix.

foreach(var TOUR CHECK OUT PICTURES)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "smoke_test.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "," ";" PICTURES "${PICTURES}")

file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND "${TOUR}" "${OUT}" RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tour exited with status ${rc}\n--- stdout\n${stdout}\n--- stderr\n${stderr}")
endif()
if(NOT stdout MATCHES "([0-9]+) of ([0-9]+) checks hold")
  message(FATAL_ERROR "tour did not print its summary line\n${stdout}")
endif()
if(NOT CMAKE_MATCH_1 EQUAL CMAKE_MATCH_2 OR CMAKE_MATCH_2 EQUAL 0)
  message(FATAL_ERROR "tour: ${CMAKE_MATCH_1} of ${CMAKE_MATCH_2} checks hold\n${stdout}")
endif()
if(NOT EXISTS "${OUT}/index.md")
  message(FATAL_ERROR "tour wrote no ${OUT}/index.md")
endif()
file(READ "${OUT}/index.md" index)

foreach(name IN LISTS PICTURES)
  set(png "${OUT}/${name}.png")
  if(NOT EXISTS "${png}")
    message(FATAL_ERROR "tour did not write ${png}\n${stdout}")
  endif()
  string(FIND "${index}" "(${name}.png)" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "index.md does not show ${name}.png")
  endif()
  list(APPEND files "${png}")
endforeach()
execute_process(COMMAND "${CHECK}" ${files} RESULT_VARIABLE rc OUTPUT_VARIABLE report ERROR_VARIABLE report)
message(STATUS "tour pictures:\n${report}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tour_check_png rejected a picture (status ${rc})")
endif()
