# Runs a lab checker on untouched starter code and passes only when it
# fails the right way: a non-zero exit AND output matching EXPECT (the name
# of the check that must fail). Used by the labNN_starter_fails tests.
#   cmake -DCMD=<checker> -DNPROC=<n> -DEXPECT=<regex> -P expect_failure.cmake
execute_process(COMMAND ${CMD} --nproc ${NPROC} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the checker passed on the untouched starter code: it cannot catch a missing solution")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the checker failed (exit ${rc}) but its output does not match '${EXPECT}'")
endif()
message("OK: the starter fails (exit ${rc}) with output matching '${EXPECT}'")
