# posenc.pc for builds without CMake, installed to <libdir>/pkgconfig. The prefix in it is
# relative to the .pc file's folder, so a prefix chosen at install time
# (`cmake --install build --prefix P`) gets a file that points into P.
set(_posenc_pc_dir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
if(IS_ABSOLUTE "${_posenc_pc_dir}")
  set(POSENC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  # "lib/pkgconfig" -> "../..", "lib/x86_64-linux-gnu/pkgconfig" -> "../../.."
  file(RELATIVE_PATH _posenc_pc_up "/prefix/${_posenc_pc_dir}" "/prefix")
  string(REGEX REPLACE "/$" "" _posenc_pc_up "${_posenc_pc_up}")
  set(POSENC_PC_PREFIX "\${pcfiledir}/${_posenc_pc_up}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(POSENC_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(POSENC_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file("${CMAKE_CURRENT_LIST_DIR}/posenc.pc.in" "${PROJECT_BINARY_DIR}/posenc.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/posenc.pc" DESTINATION "${_posenc_pc_dir}")
