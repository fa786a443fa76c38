# The launcher test: tools/xcollrun end to end (prefixing, environment,
# failure handling, restarts, bad flags) and tools/xcoll-trace-merge.
# Included from tests/CMakeLists.txt.
if(TARGET xcollrun)
  add_test(NAME launcher.xcollrun
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/launcher/test_xcollrun.sh
            $<TARGET_FILE:xcollrun>
            ${PROJECT_SOURCE_DIR}/tools/xcoll-trace-merge)
  set_tests_properties(launcher.xcollrun PROPERTIES TIMEOUT 300 LABELS launcher)
endif()
