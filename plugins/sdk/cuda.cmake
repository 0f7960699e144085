# The CUDA plugins' shared NVRTC compile-and-cache code (weft/cuda_module.h), included by each
# CUDA plugin's CMakeLists.txt (the include guard makes the order of bundles irrelevant):
#  - weft_cuda_module: a static, position-independent library linked into every CUDA bundle; it
#    needs only the CUDA headers, so a bundle that dlopens the driver and NVRTC stays free of them;
#  - weft_nvrtc_check(): one build-time check program and ctest per kernel source.
include_guard(GLOBAL)
find_package(CUDAToolkit REQUIRED)

add_library(weft_cuda_module STATIC ${CMAKE_CURRENT_LIST_DIR}/cuda_module.c)
target_include_directories(weft_cuda_module PUBLIC ${CMAKE_CURRENT_LIST_DIR}
  ${CMAKE_SOURCE_DIR}/runtime/include ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(weft_cuda_module PUBLIC PkgConfig::XXHASH)
target_compile_options(weft_cuda_module PRIVATE ${WEFT_WARN_FLAGS})
set_target_properties(weft_cuda_module PROPERTIES POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET hidden)

# weft_nvrtc_check(NAME <target and test> SOURCE_C <embedded .c> SYMBOL <its array> FILE <x.cu>
#                  ARCH <sm_..> [SETS <comma-separated define set>...])
function(weft_nvrtc_check)
  cmake_parse_arguments(C "" "NAME;SOURCE_C;SYMBOL;FILE;ARCH" "SETS" ${ARGN})
  add_executable(${C_NAME} ${CMAKE_SOURCE_DIR}/plugins/sdk/nvrtc_check.c ${C_SOURCE_C})
  target_compile_definitions(${C_NAME} PRIVATE WEFT_NVRTC_CHECK_SOURCE=${C_SYMBOL})
  target_compile_options(${C_NAME} PRIVATE ${WEFT_WARN_FLAGS})
  target_link_libraries(${C_NAME} PRIVATE weft_cuda_module CUDA::nvrtc)
  # CUDA::nvrtc drags in the driver stub; the check never calls the driver, and a sanitizer link
  # (no --as-needed by default) would otherwise require libcuda.so.1 on a machine without one.
  target_link_options(${C_NAME} PRIVATE LINKER:--as-needed)
  set_target_properties(${C_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests
    BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}")
  if(WEFT_BUILD_TESTS)
    add_test(NAME ${C_NAME} COMMAND ${C_NAME} ${C_FILE} ${C_ARCH} ${C_SETS})
  endif()
endfunction()
