// Reading the launcher's environment: which launcher, the rank, size and local rank, and the
// exact messages for bad values.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "executor/launch/env.h"

namespace ptdp {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string ErrorOf(std::map<std::string, std::string> vars) {
  try {
    ReadLaunchEnv(Env(std::move(vars)));
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(LaunchEnv, NoLauncherIsOneRank) {
  const LaunchEnv e = ReadLaunchEnv(Env({{"HOME", "/root"}}));
  EXPECT_EQ(e, LaunchEnv{});
  EXPECT_FALSE(e.mpi());
}

TEST(LaunchEnv, OpenMpi) {
  const LaunchEnv e =
      ReadLaunchEnv(Env({{"OMPI_COMM_WORLD_RANK", "9"},
                         {"OMPI_COMM_WORLD_SIZE", "16"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"},
                         // srun's variables under mpirun inside an allocation: mpirun's win.
                         {"SLURM_PROCID", "0"},
                         {"SLURM_NTASKS", "2"}}));
  EXPECT_EQ(e.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(e.rank, 9);
  EXPECT_EQ(e.size, 16);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 8);
  EXPECT_TRUE(e.mpi());
}

TEST(LaunchEnv, SlurmAndPmix) {
  const std::map<std::string, std::string> slurm = {
      {"SLURM_PROCID", "11"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"}};
  LaunchEnv e = ReadLaunchEnv(Env(slurm));
  EXPECT_EQ(e.launcher, Launcher::kSlurm);
  EXPECT_EQ(e.rank, 11);
  EXPECT_EQ(e.size, 16);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.local_size, 0);  // Slurm does not say it in one variable
  auto pmix = slurm;
  pmix["PMIX_RANK"] = "11";
  EXPECT_EQ(ReadLaunchEnv(Env(pmix)).launcher, Launcher::kPmix);
}

TEST(LaunchEnv, PmiFromMpichHydra) {
  const LaunchEnv e = ReadLaunchEnv(Env(
      {{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "1"}}));
  EXPECT_EQ(e.launcher, Launcher::kPmi);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.size, 4);
}

TEST(LaunchEnv, TorchrunStyleWinsOverTheSlurmTaskItRunsIn) {
  const LaunchEnv e = ReadLaunchEnv(Env({{"RANK", "5"},
                                         {"WORLD_SIZE", "16"},
                                         {"LOCAL_RANK", "5"},
                                         {"LOCAL_WORLD_SIZE", "8"},
                                         {"MASTER_ADDR", "node-0.cluster"},
                                         {"MASTER_PORT", "29500"},
                                         {"SLURM_PROCID", "0"},
                                         {"SLURM_NTASKS", "2"},
                                         {"SLURM_LOCALID", "0"}}));
  EXPECT_EQ(e.launcher, Launcher::kTorchrun);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.size, 16);
  EXPECT_EQ(e.local_rank, 5);
  EXPECT_EQ(e.master_addr, "node-0.cluster");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_FALSE(e.mpi());
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  const std::map<std::string, std::string> good = {{"RANK", "1"},
                                                   {"WORLD_SIZE", "2"},
                                                   {"LOCAL_RANK", "1"},
                                                   {"MASTER_ADDR", "h"},
                                                   {"MASTER_PORT", "29500"}};
  auto with = [&](const std::string& name, const std::string& value) {
    auto vars = good;
    vars[name] = value;
    return ErrorOf(vars);
  };
  EXPECT_EQ(with("WORLD_SIZE", "two"),
            "WORLD_SIZE: must be a positive integer, got \"two\" (hint: the launcher (mpirun, "
            "srun, torchrun) sets it; unset it to run one rank)");
  EXPECT_EQ(with("RANK", "2").substr(0, 55),
            "RANK: must be a rank in [0, 2) (WORLD_SIZE is 2), got \"");
  EXPECT_NE(with("RANK", "-1").find("RANK: must be a rank in [0, 2)"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000")
                .find("MASTER_PORT: must be a TCP port in [1, 65535], "
                      "got \"70000\""),
            std::string::npos);
  EXPECT_NE(with("LOCAL_RANK", "1x").find("LOCAL_RANK: must be an integer in [0, 1], got \"1x\""),
            std::string::npos);
  auto without = [&](const std::string& name) {
    auto vars = good;
    vars.erase(name);
    return ErrorOf(vars);
  };
  EXPECT_EQ(without("MASTER_ADDR").substr(0, 36), "MASTER_ADDR: not set, but RANK is (h");
  EXPECT_NE(without("WORLD_SIZE").find("WORLD_SIZE: not set, but RANK is"), std::string::npos);
  EXPECT_EQ(without("LOCAL_RANK"), "no error");  // unknown: GpuOfRank refuses it (below)
  EXPECT_NE(
      ErrorOf({{"PMI_RANK", "x"}}).find("PMI_RANK: must be a non-negative integer, got \"x\""),
      std::string::npos);
}

// MPI launchers that leave out a size or local rank: MPI says the size; a CPU rank needs no GPU.
TEST(LaunchEnv, MpiLaunchersMayLeaveOutSizesAndLocalRanks) {
  LaunchEnv e = ReadLaunchEnv(Env({{"OMPI_COMM_WORLD_RANK", "3"}}));
  EXPECT_EQ(e.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.size, 0);
  EXPECT_EQ(e.local_rank, -1);
  EXPECT_EQ(GpuOfRank(e, 1), 0);
  try {
    GpuOfRank(e, 8);
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    EXPECT_STREQ(error.what(),
                 "OMPI_COMM_WORLD_LOCAL_RANK: not set: rank 3 cannot tell which of this node's 8 "
                 "GPUs is its own (hint: launchers set the rank on the node; set it to the GPU of "
                 "the rank)");
  }
  // srun --mpi=pmi2: PMI_RANK, with Slurm's size and local rank.
  e = ReadLaunchEnv(Env({{"PMI_RANK", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(e.launcher, Launcher::kPmi);
  EXPECT_EQ(e.size, 16);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_rank_variable, "SLURM_LOCALID");
}

TEST(LaunchEnv, OneProcessPerGpu) {
  const LaunchEnv e =
      ReadLaunchEnv(Env({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(GpuOfRank(e, 8), 1);
  EXPECT_EQ(GpuOfRank(e, 1), 0);  // the one GPU srun bound to the task
  const LaunchEnv third =
      ReadLaunchEnv(Env({{"SLURM_PROCID", "10"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "2"}}));
  try {
    GpuOfRank(third, 2);
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where().key, "SLURM_LOCALID");
    EXPECT_EQ(error.message(), "rank 10 is process 2 on its node, which has 2 GPUs");
  }
  EXPECT_EQ(GpuOfRank(LaunchEnv{}, 1), 0);
}

}  // namespace
}  // namespace ptdp
