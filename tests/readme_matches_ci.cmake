# Checks that .ci/run runs the README's test command, to the letter.
file(STRINGS ${SOURCE_DIR}/.ci/run ci_lines REGEX "^apt-get ")
list(GET ci_lines 0 ci_command)
file(READ ${SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "${ci_command}" at)
if(at EQUAL -1)
  message(FATAL_ERROR ".ci/run's command is not in README.md:\n${ci_command}")
endif()
message(STATUS "README and .ci/run agree: ${ci_command}")
