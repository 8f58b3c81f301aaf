// Runs a test's body in a forked child process with a time limit, for what could hang (a read
// that waits on a named pipe, a thread team after fork): the child's exit status is the result,
// and a child still running at the limit is killed and reported as hung.
//
//   CHECK(headwise_test::in_child([] { return load_never_waits() ? 0 : 1; }) == "exit 0");
#pragma once

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace headwise_test {

/// Forks; the child runs body() (an int: its exit status; an exception: status 99) and exits
/// without unwinding the parent's state. Returns "exit N", "signal N", or "hung" when the child
/// has not ended after `limit` (it is then killed).
template <class Body>
std::string in_child(Body body, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const pid_t child = fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    int status = 99;
    try {
      status = body();
    } catch (...) {
    }
    std::_Exit(status);
  }
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0) return "waitpid failed";
    if (std::chrono::steady_clock::now() > end) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return "hung";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "ended";
}

}  // namespace headwise_test
