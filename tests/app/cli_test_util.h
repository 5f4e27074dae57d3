// Shared helpers for the tests that run the `hybridlens` binary (HL_HYBRIDLENS) as a user would:
// a scratch folder per test process, line counts and one way to run a command
// with its stdout and stderr captured (fork + execv, no shell, so arguments need no quoting).
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/engine/test_util.h"

namespace hl::test {

struct CliResult {
  int status = -1;  // the exit code, or 128 + the signal that ended it
  std::string out, err;
  double seconds = 0;  // wall-clock time of the run
};

// Lines of `s`, a last line without '\n' included.
inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

// One folder for this test process, removed when it ends unless a test failed (process_scratch).
inline const std::string& cli_scratch() {
  return process_scratch();
}

// Runs argv (argv[0] a path) with `env` added ("NAME=value"), stdin from /dev/null; stdout and
// stderr go through files in cli_scratch() so a large output cannot block the child.
inline CliResult run_command(std::vector<std::string> argv, const std::vector<std::string>& env = {}) {
  static int counter = 0;
  const std::string out = cli_scratch() + "/out" + std::to_string(counter) + ".txt";
  const std::string err = cli_scratch() + "/err" + std::to_string(counter++) + ".txt";
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<std::string> envs = env;  // putenv keeps the pointer: the strings outlive the exec
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (std::string& e : envs) ::putenv(e.data());
    const int i = ::open("/dev/null", O_RDONLY), o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644),
              e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (i < 0 || o < 0 || e < 0) ::_exit(126);
    ::dup2(i, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  CliResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

#ifdef HL_HYBRIDLENS
// `hybridlens ARGS` (the binary this build made).
inline CliResult hybridlens(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), HL_HYBRIDLENS);
  return run_command(std::move(args), env);
}

#ifdef HL_MPIEXEC
// The environment of the MPI tests' launches: mpirun as root (CI) needs the first two; vader's
// single-copy (CMA, process_vm_readv) is refused in containers without CAP_SYS_PTRACE, so the
// ranks' messages go through shared memory copies instead.
inline const std::vector<std::string>& mpi_env() {
  static const std::vector<std::string> e = [] {
    std::vector<std::string> v = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                  "OMPI_MCA_btl_vader_single_copy_mechanism=none"};
#ifdef HL_SANITIZED
    // Open MPI leaves allocations of its plugins (unloaded by MPI_Finalize, so LeakSanitizer cannot
    // even name them) that the leak check reports in any MPI program: off for the ranks only.
    const char* a = std::getenv("ASAN_OPTIONS");
    v.push_back(std::string("ASAN_OPTIONS=") + (a ? std::string(a) + ":" : "") + "detect_leaks=0");
#endif
    return v;
  }();
  return e;
}

// `mpirun --oversubscribe -np NP hybridlens ARGS` (3 ranks may share 2 cores); the HL_ variables of
// `env` are passed on to the ranks (-x).
inline CliResult mpirun(int np, const std::vector<std::string>& args, const std::vector<std::string>& env = mpi_env()) {
  std::vector<std::string> argv = {HL_MPIEXEC, "--oversubscribe", "-np", std::to_string(np)};
  for (const std::string& e : env)
    if (e.rfind("HL_", 0) == 0) argv.insert(argv.end(), {"-x", e.substr(0, e.find('='))});
  argv.push_back(HL_HYBRIDLENS);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(std::move(argv), env);
}
#endif
#endif

}  // namespace hl::test
