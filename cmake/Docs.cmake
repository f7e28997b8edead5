# `docs` target: Doxygen over the public headers (docs/Doxyfile) into
# build/docs/html; warnings go to build/docs/warnings.log. A CTest test runs
# the same and fails on any warning, so the docs keep building clean.
find_package(Doxygen)
if(DOXYGEN_FOUND)
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_SOURCE_DIR}/build/docs
    COMMAND ${DOXYGEN_EXECUTABLE} ${CMAKE_SOURCE_DIR}/docs/Doxyfile
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
    COMMENT "Doxygen: API docs into build/docs/html"
    VERBATIM)
  if(TITAN_BUILD_TESTS)
    add_test(NAME docs_build_clean
             COMMAND sh -c "mkdir -p build/docs && ${DOXYGEN_EXECUTABLE} docs/Doxyfile && if [ -s build/docs/warnings.log ]; then cat build/docs/warnings.log; exit 1; fi"
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(docs_build_clean PROPERTIES LABELS "docs" TIMEOUT 120)
  endif()
endif()
