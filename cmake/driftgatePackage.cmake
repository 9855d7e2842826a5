# Installs driftgate as a CMake package: the candidate ABI header, the driftgate executable and
# driftgateConfig.cmake with the targets driftgate::abi and driftgate::driftgate, so that a kernel
# project can find_package(driftgate) and build a plugin (candidates/examples/plugin shows how).
#   cmake --install build --prefix /opt/driftgate
#   cmake -S mykernel -B mykernel/build -DCMAKE_PREFIX_PATH=/opt/driftgate
include(CMakePackageConfigHelpers)

file(STRINGS ${PROJECT_SOURCE_DIR}/include/driftgate/candidate_abi.h DG_ABI_LINE
     REGEX "^#define DRIFTGATE_ABI_VERSION [0-9]+")
string(REGEX REPLACE "^#define DRIFTGATE_ABI_VERSION ([0-9]+).*" "\\1" DRIFTGATE_ABI_VERSION "${DG_ABI_LINE}")

set(DG_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/driftgate)
install(FILES ${PROJECT_SOURCE_DIR}/include/driftgate/candidate_abi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/driftgate)
install(TARGETS dg_abi driftgate EXPORT driftgateTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT driftgateTargets NAMESPACE driftgate:: DESTINATION ${DG_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/driftgateConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/driftgateConfig.cmake INSTALL_DESTINATION ${DG_CMAKE_DIR})
# The ABI has its own version (DRIFTGATE_ABI_VERSION, checked when a plugin loads); the package
# version follows the project's.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/driftgateConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/driftgateConfig.cmake ${PROJECT_BINARY_DIR}/driftgateConfigVersion.cmake
        DESTINATION ${DG_CMAKE_DIR})
