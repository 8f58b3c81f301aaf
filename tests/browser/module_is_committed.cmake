# Fails unless docs/toys/headwise_toys.js and .wasm are exactly as committed at HEAD: neither
# changed (staged or not), nor missing, nor untracked.
foreach(file docs/toys/headwise_toys.js docs/toys/headwise_toys.wasm)
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} status --porcelain -- ${file}
                  OUTPUT_VARIABLE status RESULT_VARIABLE failed)
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} ls-files --error-unmatch -- ${file}
                  OUTPUT_QUIET ERROR_QUIET RESULT_VARIABLE untracked)
  if(failed OR untracked OR NOT status STREQUAL "")
    message(FATAL_ERROR "${file} is not the committed module (${status}): rebuild it with `cmake --workflow --preset wasm` and commit it")
  endif()
endforeach()
message(STATUS "the toys' module is the committed one")
