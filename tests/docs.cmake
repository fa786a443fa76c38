# The documentation's runnable blocks and examples (tests/docs/doc_blocks.py).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET xcollrun AND TARGET xcoll)
  # A sanitizer build's libxcoll needs the sanitizer's runtime in the
  # program too, which the blocks' plain cc commands do not link: there
  # the test reports itself skipped (77) after the checks that build
  # nothing.
  add_test(NAME docs.blocks
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/docs/doc_blocks.py
      ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} "${XCOLL_SANITIZE}")
  set_tests_properties(docs.blocks PROPERTIES TIMEOUT 300 LABELS "docs;mp"
    SKIP_RETURN_CODE 77)
endif()

# The index links every page, README's ctest labels match ctest's, and no
# doc or source comment carries dated history (tests/docs/doc_index.py).
if(Python3_Interpreter_FOUND)
  add_test(NAME docs.index
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/docs/doc_index.py
      ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} ${CMAKE_CTEST_COMMAND})
  set_tests_properties(docs.index PROPERTIES TIMEOUT 60 LABELS docs)
endif()
