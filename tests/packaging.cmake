# Packaging tests (label packaging): what an installed xcoll looks like to
# the programs that use it. tests/packaging/*.sh, each a few seconds.

# libxcoll.so exports the functions of include/xcoll.h and nothing else.
add_test(NAME packaging.exported_symbols
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/packaging/exported_symbols.sh
          $<TARGET_FILE:xcoll> ${PROJECT_SOURCE_DIR}/include/xcoll.h)
set_tests_properties(packaging.exported_symbols PROPERTIES
  LABELS packaging TIMEOUT 60 SKIP_RETURN_CODE 77)
