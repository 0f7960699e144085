# weft_add_plugin(NAME <bundle-name> MANIFEST <manifest.yaml> SOURCES <c files...>
#                 [LIBRARY <output name without lib/.so>] [LINK <libs...>] [INCLUDES <dirs...>]
#                 [OUTPUT_DIR <dir>] [NO_INSTALL])
# Builds one plugin bundle: a shared object plus a copy of its manifest, placed in
# <build>/lib/weft/plugins/<bundle-name>/ (and installed to <libdir>/weft/plugins/<bundle-name>/).
# Used by the in-tree bundles and, through the installed CMake package, by out-of-tree bundles.
# OUTPUT_DIR puts the bundle in <dir>/<bundle-name>/ instead, outside the registry's search path
# (test-only plugins: fakes, the template); NO_INSTALL leaves it out of `cmake --install`.
# The library name defaults to libweft-<name with dots as dashes>.so; the manifest's `library`
# field must name that file.
function(weft_add_plugin)
  cmake_parse_arguments(P "NO_INSTALL" "NAME;MANIFEST;LIBRARY;OUTPUT_DIR" "SOURCES;LINK;INCLUDES" ${ARGN})
  if(NOT P_NAME OR NOT P_MANIFEST OR NOT P_SOURCES)
    message(FATAL_ERROR "weft_add_plugin needs NAME, MANIFEST and SOURCES")
  endif()
  if(NOT P_LIBRARY)
    string(REPLACE "." "-" P_LIBRARY "weft-${P_NAME}")
  endif()
  set(target "plugin_${P_NAME}")
  string(REPLACE "." "_" target "${target}")
  string(REPLACE "-" "_" target "${target}")
  add_library(${target} MODULE ${P_SOURCES})
  if(TARGET weft)
    target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/runtime/include ${CMAKE_SOURCE_DIR}/plugins/sdk)
  else()
    target_link_libraries(${target} PRIVATE weft::headers)
  endif()
  if(P_INCLUDES)
    target_include_directories(${target} PRIVATE ${P_INCLUDES})
  endif()
  if(P_LINK)
    target_link_libraries(${target} PRIVATE ${P_LINK})
  endif()
  if(DEFINED WEFT_WARN_FLAGS)
    target_compile_options(${target} PRIVATE ${WEFT_WARN_FLAGS})
  endif()
  if(NOT DEFINED WEFT_BUILD_PLUGIN_DIR)
    set(WEFT_BUILD_PLUGIN_DIR ${CMAKE_BINARY_DIR}/lib/weft/plugins)
  endif()
  if(NOT DEFINED WEFT_PLUGIN_SUBDIR)
    set(WEFT_PLUGIN_SUBDIR lib/weft/plugins)
  endif()
  if(P_OUTPUT_DIR)
    set(outdir ${P_OUTPUT_DIR}/${P_NAME})
  else()
    set(outdir ${WEFT_BUILD_PLUGIN_DIR}/${P_NAME})
  endif()
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME ${P_LIBRARY}
    LIBRARY_OUTPUT_DIRECTORY ${outdir} C_VISIBILITY_PRESET hidden)
  get_filename_component(manifest_abs ${P_MANIFEST} ABSOLUTE)
  # The copy is a build output of the target (not a post-build step), so editing the manifest
  # alone refreshes the bundle.
  add_custom_command(OUTPUT ${outdir}/manifest.yaml DEPENDS ${manifest_abs}
    COMMAND ${CMAKE_COMMAND} -E copy ${manifest_abs} ${outdir}/manifest.yaml
    COMMENT "Bundle manifest ${P_NAME}")
  target_sources(${target} PRIVATE ${outdir}/manifest.yaml)
  if(NOT P_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${WEFT_PLUGIN_SUBDIR}/${P_NAME})
    install(FILES ${manifest_abs} DESTINATION ${WEFT_PLUGIN_SUBDIR}/${P_NAME} RENAME manifest.yaml)
  endif()
endfunction()
