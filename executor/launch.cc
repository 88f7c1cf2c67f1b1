#include "executor/launch.h"

#include <fcntl.h>
#include <mpi.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

extern char** environ;

namespace ptdp {

std::string MpiexecPath() {
#ifdef PTDP_MPIEXEC
  const std::string built = PTDP_MPIEXEC;
  if (!built.empty() && std::filesystem::exists(built)) return built;
#endif
  return "mpirun";
}

std::string SelfExecutable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ptdp") : path.string();
}

LaunchCommand MakeLaunchCommand(int64_t ranks, const std::string& ptdp_executable,
                                const std::vector<std::string>& execute_args,
                                const std::vector<std::string>& extra_mpirun_args, bool as_root) {
  LaunchCommand c;
  c.argv = {MpiexecPath(), "-np", std::to_string(ranks)};
#ifdef OMPI_MAJOR_VERSION
  c.argv.insert(c.argv.end(), {"--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1",
                               "-x", "OPENBLAS_NUM_THREADS=1"});
  if (as_root) c.argv.push_back("--allow-run-as-root");
#else
  (void)as_root;
#endif
  c.argv.insert(c.argv.end(), extra_mpirun_args.begin(), extra_mpirun_args.end());
  c.argv.push_back(ptdp_executable);
  c.argv.push_back("execute");
  c.argv.insert(c.argv.end(), execute_args.begin(), execute_args.end());
  return c;
}

int RunLaunchCommand(const LaunchCommand& command) {
  std::vector<char*> argv;
  for (const std::string& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw InputError({"", 0, "--launch"},
                     std::string("cannot start ") + argv[0] + ": " + std::strerror(rc),
                     "install OpenMPI's mpirun, or start the ranks yourself with mpirun -np N");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace ptdp
