#include "executor/launch/launch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "executor/launch/env.h"

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

LaunchCommand MakeSrunCommand(int64_t ranks, int ranks_per_node, const std::string& ptdp_executable,
                              const std::vector<std::string>& execute_args,
                              const std::vector<std::string>& extra_srun_args) {
  LaunchCommand c;
  c.argv = {"srun", "--ntasks", std::to_string(ranks)};
  if (ranks_per_node > 0) {
    c.argv.insert(c.argv.end(),
                  {"--ntasks-per-node", std::to_string(std::min<int64_t>(ranks, ranks_per_node))});
  }
  // A rank that exits with an error ends the job step (the others would wait for it).
  c.argv.push_back("--kill-on-bad-exit=1");
  c.argv.insert(c.argv.end(), extra_srun_args.begin(), extra_srun_args.end());
  c.argv.push_back(ptdp_executable);
  c.argv.push_back("execute");
  c.argv.insert(c.argv.end(), execute_args.begin(), execute_args.end());
  return c;
}

LaunchCommand MakeLocalTorchrunCommand(int64_t ranks, int master_port,
                                       const std::string& ptdp_executable,
                                       const std::vector<std::string>& execute_args) {
  LaunchCommand c;
  c.argv = {ptdp_executable, "execute"};
  c.argv.insert(c.argv.end(), execute_args.begin(), execute_args.end());
  for (int64_t r = 0; r < ranks; ++r) {
    c.rank_env.push_back({"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(ranks),
                          "LOCAL_RANK=" + std::to_string(r),
                          "LOCAL_WORLD_SIZE=" + std::to_string(ranks), "MASTER_ADDR=127.0.0.1",
                          "MASTER_PORT=" + std::to_string(master_port)});
  }
  return c;
}

Launcher ChooseLauncher(const std::optional<std::string>& flag,
                        const std::optional<std::string>& slurm_job_id) {
  if (!flag) {
    return slurm_job_id && !slurm_job_id->empty() ? Launcher::kSlurm : Launcher::kOpenMpi;
  }
  if (*flag == "mpirun") return Launcher::kOpenMpi;
  if (*flag == "srun") return Launcher::kSlurm;
  if (*flag == "torchrun") return Launcher::kTorchrun;
  throw InputError({"", 0, "--launcher"},
                   fmt::format("expected mpirun, srun or torchrun, got \"{}\"", *flag));
}

std::string DescribeLaunch(const LaunchCommand& command) {
  std::string line;
  if (!command.rank_env.empty()) {
    // The variables of the first and the last rank: "RANK=0..3 WORLD_SIZE=4 ...".
    const std::vector<std::string>& first = command.rank_env.front();
    const std::vector<std::string>& last = command.rank_env.back();
    for (size_t i = 0; i < first.size(); ++i) {
      line += (line.empty() ? "" : " ") + first[i];
      if (last[i] != first[i]) line += ".." + last[i].substr(last[i].find('=') + 1);
    }
  }
  for (const std::string& a : command.argv) line += (line.empty() ? "" : " ") + a;
  return line;
}

int FreeLocalPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  int port = 29500;  // torchrun's default, when the system will not say
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

namespace {

// This process's environment with `set` (NAME=VALUE) replacing variables of the same name, and
// the MPI launchers' rank variables removed (they would win over torchrun's: env.h).
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& set) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env[entry.substr(0, eq)] = entry;
  }
  if (!set.empty()) {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) env.erase(name);
  }
  for (const std::string& entry : set) env[entry.substr(0, entry.find('='))] = entry;
  std::vector<std::string> out;
  for (auto& [name, entry] : env) out.push_back(std::move(entry));
  return out;
}

pid_t Spawn(const std::vector<std::string>& args, const std::vector<std::string>& set_env) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env_strings = ChildEnvironment(set_env);
  std::vector<char*> envp;
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw InputError({"", 0, "--launch"},
                     std::string("cannot start ") + argv[0] + ": " + std::strerror(rc),
                     "install the launcher (OpenMPI's mpirun, Slurm's srun), or start the ranks "
                     "yourself");
  }
  return pid;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int RunLaunchCommand(const LaunchCommand& command) {
  const std::vector<std::vector<std::string>> processes =
      command.rank_env.empty() ? std::vector<std::vector<std::string>>{{}} : command.rank_env;
  std::vector<pid_t> running;
  try {
    for (const std::vector<std::string>& env : processes) {
      running.push_back(Spawn(command.argv, env));
    }
  } catch (...) {
    for (const pid_t pid : running) ::kill(pid, SIGTERM);
    for (const pid_t pid : running) waitpid(pid, nullptr, 0);
    throw;
  }
  int result = 0;
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return result != 0 ? result : 1;
    }
    const auto it = std::find(running.begin(), running.end(), pid);
    if (it == running.end()) continue;  // not one of ours
    running.erase(it);
    const int code = ExitCode(status);
    if (code != 0 && result == 0) {
      result = code;
      // One rank failed: the others would wait for it (their watchdogs would end them later).
      for (const pid_t other : running) ::kill(other, SIGTERM);
    }
  }
  return result;
}

}  // namespace ptdp
