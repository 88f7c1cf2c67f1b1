// `ptdp execute --launch`'s commands: which launcher, srun's and torchrun-style argv and
// environments, running several processes that stop together when one fails, and mpirun's line.
#include "executor/launch/launch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/error.h"
#include "executor/launch/env.h"

namespace ptdp {
namespace {

using Args = std::vector<std::string>;

TEST(LaunchCommands, ChoosesSrunInsideASlurmAllocationElseMpirun) {
  EXPECT_EQ(ChooseLauncher(std::nullopt, std::nullopt), Launcher::kOpenMpi);
  EXPECT_EQ(ChooseLauncher(std::nullopt, "12345"), Launcher::kSlurm);
  EXPECT_EQ(ChooseLauncher(std::nullopt, ""), Launcher::kOpenMpi);
  EXPECT_EQ(ChooseLauncher("mpirun", "12345"), Launcher::kOpenMpi);
  EXPECT_EQ(ChooseLauncher("srun", std::nullopt), Launcher::kSlurm);
  EXPECT_EQ(ChooseLauncher("torchrun", std::nullopt), Launcher::kTorchrun);
  try {
    ChooseLauncher("pdsh", std::nullopt);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--launcher: expected mpirun, srun or torchrun, got \"pdsh\"");
  }
}

TEST(LaunchCommands, SrunOneTaskPerGpu) {
  const LaunchCommand c = MakeSrunCommand(
      16, 8, "/opt/ptdp", {"--plan", "p.yaml", "--backend", "cuda"}, {"--mpi=pmix"});
  EXPECT_EQ(c.argv,
            (Args{"srun", "--ntasks", "16", "--ntasks-per-node", "8", "--kill-on-bad-exit=1",
                  "--mpi=pmix", "/opt/ptdp", "execute", "--plan", "p.yaml", "--backend", "cuda"}));
  EXPECT_TRUE(c.rank_env.empty());
  // Fewer ranks than GPUs on a node; CPU ranks leave the placement to Slurm.
  EXPECT_EQ(MakeSrunCommand(2, 8, "ptdp", {}, {}).argv,
            (Args{"srun", "--ntasks", "2", "--ntasks-per-node", "2", "--kill-on-bad-exit=1", "ptdp",
                  "execute"}));
  EXPECT_EQ(MakeSrunCommand(4, 0, "ptdp", {}, {}).argv,
            (Args{"srun", "--ntasks", "4", "--kill-on-bad-exit=1", "ptdp", "execute"}));
}

TEST(LaunchCommands, TorchrunStyleProcessesOnThisNode) {
  const LaunchCommand c = MakeLocalTorchrunCommand(2, 29511, "/opt/ptdp", {"--plan", "p.yaml"});
  EXPECT_EQ(c.argv, (Args{"/opt/ptdp", "execute", "--plan", "p.yaml"}));
  ASSERT_EQ(c.rank_env.size(), 2u);
  EXPECT_EQ(c.rank_env[1], (Args{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                                 "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29511"}));
  EXPECT_EQ(DescribeLaunch(c),
            "RANK=0..1 WORLD_SIZE=2 LOCAL_RANK=0..1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
            "MASTER_PORT=29511 /opt/ptdp execute --plan p.yaml");
  // What each process reads back is the launch the rank expects.
  for (int r = 0; r < 2; ++r) {
    const Args& vars = c.rank_env[static_cast<size_t>(r)];
    const LaunchEnv env = ReadLaunchEnv([&](std::string_view name) -> std::optional<std::string> {
      for (const std::string& v : vars) {
        if (v.substr(0, v.find('=')) == name) return v.substr(v.find('=') + 1);
      }
      return std::nullopt;
    });
    EXPECT_EQ(env.launcher, Launcher::kTorchrun);
    EXPECT_EQ(env.rank, r);
    EXPECT_EQ(env.local_rank, r);
    EXPECT_EQ(env.master_port, 29511);
  }
  EXPECT_GT(FreeLocalPort(), 0);
}

TEST(LaunchCommands, EveryProcessGetsItsVariablesAndTheFirstFailureStopsTheRest) {
  // The MPI rank variables of the launching process (inside an mpirun job) would win over
  // torchrun's in each rank (executor/launch/env.h): they are removed.
  ::setenv("OMPI_COMM_WORLD_RANK", "9", 1);
  LaunchCommand ok;
  ok.argv = {"sh", "-c", "[ \"$WORLD_SIZE\" = 3 ] && [ -z \"$OMPI_COMM_WORLD_RANK\" ]"};
  ok.rank_env = {
      {"RANK=0", "WORLD_SIZE=3"}, {"RANK=1", "WORLD_SIZE=3"}, {"RANK=2", "WORLD_SIZE=3"}};
  EXPECT_EQ(RunLaunchCommand(ok), 0);
  ok.rank_env[2] = {"RANK=2", "WORLD_SIZE=4"};
  EXPECT_EQ(RunLaunchCommand(ok), 1);
  ::unsetenv("OMPI_COMM_WORLD_RANK");

  // Rank 1 fails at once; the others would sleep for 30 s.
  LaunchCommand failing;
  failing.argv = {"sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 30"};
  failing.rank_env = {{"RANK=0"}, {"RANK=1"}, {"RANK=2"}};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RunLaunchCommand(failing), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  LaunchCommand missing;
  missing.argv = {"/no/such/launcher"};
  EXPECT_THROW(RunLaunchCommand(missing), InputError);
}

TEST(Launch, MpirunLineRunsThisBinaryWithOneRankPerGpu) {
  const LaunchCommand c =
      MakeLaunchCommand(8, "/x/ptdp", {"--plan", "p.yaml"}, {"--hostfile", "h"}, true);
  EXPECT_EQ(c.argv[1], "-np");
  EXPECT_EQ(c.argv[2], "8");
  const std::vector<std::string> tail(c.argv.end() - 6, c.argv.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"--hostfile", "h", "/x/ptdp", "execute", "--plan",
                                            "p.yaml"}));
#ifdef OMPI_MAJOR_VERSION
  EXPECT_NE(std::find(c.argv.begin(), c.argv.end(), "--allow-run-as-root"), c.argv.end());
  EXPECT_NE(std::find(c.argv.begin(), c.argv.end(), "OPENBLAS_NUM_THREADS=1"), c.argv.end());
#endif
}

}  // namespace
}  // namespace ptdp
