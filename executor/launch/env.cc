#include "executor/launch/env.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace ptdp {
namespace {

// The variables of one launcher: rank, then size, local rank and local size, each the first of
// its names that is set ("" ends a list).
struct Names {
  Launcher launcher;
  const char* rank;
  const char* size[2];
  const char* local_rank[2];
  const char* local_size[2];
};

constexpr Names kLaunchers[] = {
    {Launcher::kOpenMpi,
     "OMPI_COMM_WORLD_RANK",
     {"OMPI_COMM_WORLD_SIZE", ""},
     {"OMPI_COMM_WORLD_LOCAL_RANK", ""},
     {"OMPI_COMM_WORLD_LOCAL_SIZE", ""}},
    // PMIx publishes its sizes through its API only; under srun the Slurm variables say them.
    {Launcher::kPmix, "PMIX_RANK", {"SLURM_NTASKS", ""}, {"SLURM_LOCALID", ""}, {"", ""}},
    // MPICH's hydra and Intel MPI set MPI_LOCALRANKID; srun --mpi=pmi2 does not.
    {Launcher::kPmi,
     "PMI_RANK",
     {"PMI_SIZE", "SLURM_NTASKS"},
     {"MPI_LOCALRANKID", "SLURM_LOCALID"},
     {"MPI_LOCALNRANKS", ""}},
    {Launcher::kTorchrun, "RANK", {"WORLD_SIZE", ""}, {"LOCAL_RANK", ""}, {"LOCAL_WORLD_SIZE", ""}},
    {Launcher::kSlurm, "SLURM_PROCID", {"SLURM_NTASKS", ""}, {"SLURM_LOCALID", ""}, {"", ""}},
};

class Reader {
 public:
  explicit Reader(const EnvLookup& env) : env_(env) {}

  std::optional<std::string> Get(std::string_view name) const {
    if (name.empty()) return std::nullopt;
    std::optional<std::string> value = env_(name);
    if (value && value->empty()) return std::nullopt;  // `export RANK=` is unset
    return value;
  }

  // The integer in `name`, in [min, max]; nullopt when unset.
  std::optional<int> Int(std::string_view name, int min, int max, std::string_view what) const {
    const std::optional<std::string> text = Get(name);
    if (!text) return std::nullopt;
    long long value = 0;
    const char* end = text->data() + text->size();
    const auto [ptr, ec] = std::from_chars(text->data(), end, value);
    if (ec != std::errc() || ptr != end || value < min || value > max) {
      throw InputError({"", 0, std::string(name)},
                       fmt::format("must be {}, got \"{}\"", what, *text),
                       "the launcher (mpirun, srun, torchrun) sets it; unset it to run one rank");
    }
    return static_cast<int>(value);
  }

  // A variable another one needs.
  std::string Required(std::string_view name, std::string_view because) const {
    std::optional<std::string> value = Get(name);
    if (!value) {
      throw InputError({"", 0, std::string(name)}, fmt::format("not set, but {} is", because),
                       "a torchrun-style launch sets RANK, WORLD_SIZE, MASTER_ADDR and "
                       "MASTER_PORT together");
    }
    return *value;
  }

 private:
  const EnvLookup& env_;
};

constexpr int kMaxInt = std::numeric_limits<int>::max();

}  // namespace

std::string_view Name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone:
      return "none";
    case Launcher::kOpenMpi:
      return "openmpi";
    case Launcher::kPmix:
      return "pmix";
    case Launcher::kPmi:
      return "pmi";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kSlurm:
      return "slurm";
  }
  return "?";
}

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

LaunchEnv ReadLaunchEnv(const EnvLookup& env) {
  const Reader read(env);
  // The first of `names` that is set.
  auto first = [&](const char* const(&names)[2]) -> const char* {
    for (const char* name : names) {
      if (*name != '\0' && read.Get(name)) return name;
    }
    return names[0];
  };
  for (const Names& n : kLaunchers) {
    if (!read.Get(n.rank)) continue;
    LaunchEnv e;
    e.launcher = n.launcher;
    if (n.launcher == Launcher::kTorchrun) {
      read.Required("WORLD_SIZE", "RANK");
      read.Required("MASTER_ADDR", "RANK");
      read.Required("MASTER_PORT", "RANK");
    }
    // An MPI launcher's ranks learn the size from MPI: a missing variable leaves it unknown (0).
    const char* size_name = first(n.size);
    e.size = read.Int(size_name, 1, kMaxInt, "a positive integer").value_or(0);
    e.rank = e.size > 0
                 ? *read.Int(n.rank, 0, e.size - 1,
                             fmt::format("a rank in [0, {}) ({} is {})", e.size, size_name, e.size))
                 : *read.Int(n.rank, 0, kMaxInt, "a non-negative integer");
    const int most = e.size > 0 ? e.size : kMaxInt;
    e.local_size =
        read.Int(first(n.local_size), 1, most, fmt::format("an integer in [1, {}]", most))
            .value_or(0);
    const int local_max = e.local_size > 0 ? e.local_size - 1 : most - 1;
    // Unknown (-1) when unset: only a rank that must choose among several GPUs needs it
    // (GpuOfRank).
    e.local_rank_variable = first(n.local_rank);
    e.local_rank = read.Int(e.local_rank_variable, 0, local_max,
                            fmt::format("an integer in [0, {}]", local_max))
                       .value_or(e.size == 1 ? 0 : -1);
    if (n.launcher == Launcher::kTorchrun) {
      e.master_addr = *read.Get("MASTER_ADDR");
      e.master_port = *read.Int("MASTER_PORT", 1, 65535, "a TCP port in [1, 65535]");
    }
    return e;
  }
  return LaunchEnv{};
}

int GpuOfRank(const LaunchEnv& env, int device_count) {
  if (device_count == 1) return 0;
  if (env.local_rank < 0) {
    // Guessing rank % GPUs would put two ranks on one device on uneven nodes.
    throw InputError({"", 0, env.local_rank_variable},
                     fmt::format("not set: rank {} cannot tell which of this node's {} GPUs is its "
                                 "own",
                                 env.rank, device_count),
                     "launchers set the rank on the node; set it to the GPU of the rank");
  }
  if (env.local_rank < device_count) return env.local_rank;
  throw InputError(
      {"", 0, env.local_rank_variable.empty() ? "--backend" : env.local_rank_variable},
      fmt::format("rank {} is process {} on its node, which has {} GPU{}", env.rank, env.local_rank,
                  device_count, device_count == 1 ? "" : "s"),
      "start one process per GPU (NCCL refuses two ranks of a communicator on one GPU): e.g. "
      "srun --ntasks-per-node=<GPUs per node>");
}

}  // namespace ptdp
