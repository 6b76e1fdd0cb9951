# Install rules and the CMake package config, so find_package(pare) works for other projects.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS pare RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS pare_core pare_distill pare_dist pare_prune pare_quantize pare_deps EXPORT pareTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir core distill dist prune quantize)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION include/pare/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(EXPORT pareTargets NAMESPACE pare:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pareConfig.cmake.in
  ${PROJECT_BINARY_DIR}/pareConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pareConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pareConfig.cmake ${PROJECT_BINARY_DIR}/pareConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare)
