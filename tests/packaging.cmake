# Packaging tests (label packaging): what an installed xcoll looks like to
# the programs that use it. tests/packaging/*.sh, each a few seconds.

# libxcoll.so exports the functions of include/xcoll.h and nothing else.
add_test(NAME packaging.exported_symbols
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/packaging/exported_symbols.sh
          $<TARGET_FILE:xcoll> ${PROJECT_SOURCE_DIR}/include/xcoll.h)
set_tests_properties(packaging.exported_symbols PROPERTIES
  LABELS packaging TIMEOUT 60 SKIP_RETURN_CODE 77)

# Install to a temporary prefix, move it, and build and run a small program
# against it with pkg-config and with find_package(xcoll), outside the
# source tree (install_consume.sh). Skipped (77) only without pkg-config.
foreach(mode pkgconfig cmake)
  add_test(NAME packaging.install_${mode}
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/packaging/install_consume.sh
            ${mode} ${PROJECT_BINARY_DIR})
  set_tests_properties(packaging.install_${mode} PROPERTIES
    LABELS packaging TIMEOUT 90 SKIP_RETURN_CODE 77)
  if(XCOLL_SANITIZE) # a sanitized libxcoll.so needs a sanitized program
    set_tests_properties(packaging.install_${mode} PROPERTIES ENVIRONMENT
      "CFLAGS=-fsanitize=${XCOLL_SANITIZE};LDFLAGS=-fsanitize=${XCOLL_SANITIZE}")
  endif()
endforeach()

# The build tree itself is a package: pkg-config with PKG_CONFIG_PATH=build
# (xcoll-uninstalled.pc) and find_package(xcoll) with xcoll_DIR=build
# (export(EXPORT ...)), without installing (build_tree_consume.sh).
foreach(mode pkgconfig cmake)
  add_test(NAME packaging.build_tree_${mode}
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/packaging/build_tree_consume.sh
            ${mode} ${PROJECT_BINARY_DIR})
  set_tests_properties(packaging.build_tree_${mode} PROPERTIES
    LABELS packaging TIMEOUT 90 SKIP_RETURN_CODE 77)
  if(XCOLL_SANITIZE)
    set_tests_properties(packaging.build_tree_${mode} PROPERTIES ENVIRONMENT
      "CFLAGS=-fsanitize=${XCOLL_SANITIZE};LDFLAGS=-fsanitize=${XCOLL_SANITIZE}")
  endif()
endforeach()

# Every program in tools/ (one per tools/*.c, and xcoll-trace-merge) and
# xtrain prints "NAME (xcoll) <project version>" for --version.
file(GLOB xcoll_tool_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tools/*.c)
set(xcoll_versioned_programs ${PROJECT_BINARY_DIR}/tools/xcoll-trace-merge)
foreach(src ${xcoll_tool_sources})
  get_filename_component(tool ${src} NAME_WE)
  list(APPEND xcoll_versioned_programs $<TARGET_FILE:${tool}>)
endforeach()
if(TARGET xtrain)
  list(APPEND xcoll_versioned_programs $<TARGET_FILE:xtrain>)
endif()
add_test(NAME packaging.tool_versions
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/packaging/tool_versions.sh
          ${PROJECT_VERSION} ${PROJECT_SOURCE_DIR}/include/xcoll.h
          ${xcoll_versioned_programs})
set_tests_properties(packaging.tool_versions PROPERTIES
  LABELS packaging TIMEOUT 60)

# scripts/setup.sh with stand-ins for dpkg, apt-get and sudo: python3 among
# the packages; root needs no sudo; a user without sudo gets a clear message.
add_test(NAME packaging.setup_script
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/packaging/setup_script.sh
          ${PROJECT_SOURCE_DIR}/scripts/setup.sh)
set_tests_properties(packaging.setup_script PROPERTIES
  LABELS packaging TIMEOUT 60)
