# Install rules: headers, the exported target, a package config with its version file, pkg-config.
include(CMakePackageConfigHelpers)

if(HEADWISE_OPENMP AND OpenMP_CXX_FOUND)
  set(HEADWISE_LINKS_OPENMP ON)
  set(HEADWISE_PC_FLAGS "-pthread -fopenmp")  # (headwise's own threads, and OpenMP for Eigen's)
else()
  set(HEADWISE_LINKS_OPENMP OFF)
  set(HEADWISE_PC_FLAGS "-pthread")
endif()

set(HEADWISE_CMAKE_DIR ${CMAKE_INSTALL_DATADIR}/cmake/headwise)

install(TARGETS headwise EXPORT headwiseTargets)
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT headwiseTargets NAMESPACE headwise:: DESTINATION ${HEADWISE_CMAKE_DIR})
# The optional parts, each in its own export file: the package config includes one only where its
# dependency is found on the user's machine (nlohmann_json, PCRE2, MPI).
set(HEADWISE_EXPORTS_IO OFF)
set(HEADWISE_EXPORTS_DISTRIBUTED OFF)
set(HEADWISE_EXPORTS_TEXT OFF)
if(TARGET headwise_text)
  set(HEADWISE_EXPORTS_TEXT ON)
  install(TARGETS headwise_text EXPORT headwiseTextTargets)
  install(EXPORT headwiseTextTargets NAMESPACE headwise:: DESTINATION ${HEADWISE_CMAKE_DIR})
endif()
if(TARGET headwise_io)
  set(HEADWISE_EXPORTS_IO ON)
  install(TARGETS headwise_io EXPORT headwiseIoTargets)
  install(EXPORT headwiseIoTargets NAMESPACE headwise:: DESTINATION ${HEADWISE_CMAKE_DIR})
endif()
set(HEADWISE_EXPORTS_COMPILED OFF)
if(TARGET headwise_compiled)
  set(HEADWISE_EXPORTS_COMPILED ON)
  install(TARGETS headwise_compiled EXPORT headwiseCompiledTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT headwiseCompiledTargets NAMESPACE headwise:: DESTINATION ${HEADWISE_CMAKE_DIR})
endif()
if(TARGET headwise_distributed)
  set(HEADWISE_EXPORTS_DISTRIBUTED ON)
  install(TARGETS headwise_distributed EXPORT headwiseDistributedTargets)
  install(EXPORT headwiseDistributedTargets NAMESPACE headwise:: DESTINATION ${HEADWISE_CMAKE_DIR})
endif()

configure_package_config_file(cmake/headwiseConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/headwiseConfig.cmake
  INSTALL_DESTINATION ${HEADWISE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/headwiseConfigVersion.cmake
  COMPATIBILITY SameMinorVersion
)
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/headwiseConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/headwiseConfigVersion.cmake
  DESTINATION ${HEADWISE_CMAKE_DIR})

configure_file(cmake/headwise.pc.in ${CMAKE_CURRENT_BINARY_DIR}/headwise.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/headwise.pc DESTINATION ${CMAKE_INSTALL_DATADIR}/pkgconfig)
