# Install rules and the CMake package config, so find_package(pare) works for other projects.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The pare command line is exported as pare::pare_cli (pare::pare is all the libraries), for
# pare_compress() (cmake/PareCompress.cmake). It finds libpare_rt.so in the prefix's lib folder.
# It finds libtorch where it was built against it: the wheel's torch/lib (which finds the CUDA
# libraries of its own wheels).
set_target_properties(pare PROPERTIES EXPORT_NAME pare_cli
                      INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};${TORCH_INSTALL_PREFIX}/lib")
install(TARGETS pare EXPORT pareTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(_libs pare_base pare_core pare_train pare_engine pare_lm pare_distill pare_compression pare_dist pare_prune pare_quantize pare_export
    pare_pipeline pare_commands pare_deps)
set(_dirs core train engine lm distill compress dist prune quantize export pipeline)
if(PARE_FEDERATED)
  list(APPEND _libs pare_federated pare_federated_wire)
  list(APPEND _dirs federated)
endif()
install(TARGETS ${_libs} EXPORT pareTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir ${_dirs})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION include/pare/${dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "wire.h" EXCLUDE)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/cli/schema.h DESTINATION include/pare/cli)
install(EXPORT pareTargets NAMESPACE pare:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare)

# The edge runtime is a package of its own, find_package(pare_rt): libpare_rt.so and its two
# headers, nothing of libtorch.
install(TARGETS pare_rt EXPORT pare_rtTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/rt/rt.h ${PROJECT_SOURCE_DIR}/rt/pare_rt.h
        DESTINATION include/pare/rt)
install(EXPORT pare_rtTargets NAMESPACE pare:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare_rt
        FILE pare_rtConfig.cmake)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pare_rtConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pare_rtConfigVersion.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare_rt)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pareConfig.cmake.in
  ${PROJECT_BINARY_DIR}/pareConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pareConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pareConfig.cmake ${PROJECT_BINARY_DIR}/pareConfigVersion.cmake
        ${PROJECT_SOURCE_DIR}/cmake/PareCompress.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pare)
