#include "executor/launch_env.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace ptdp {
namespace {

// The variables of one launcher: rank, size, local rank, local size ("" when it has none).
struct Names {
  Launcher launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Names kLaunchers[] = {
    {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    // PMIx publishes its sizes through its API only; under srun the Slurm variables say them.
    {Launcher::kPmix, "PMIX_RANK", "SLURM_NTASKS", "SLURM_LOCALID", ""},
    {Launcher::kPmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {Launcher::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""},
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
  for (const Names& n : kLaunchers) {
    if (!read.Get(n.rank)) continue;
    LaunchEnv e;
    e.launcher = n.launcher;
    if (n.launcher == Launcher::kTorchrun) {
      read.Required("WORLD_SIZE", "RANK");
      read.Required("MASTER_ADDR", "RANK");
      read.Required("MASTER_PORT", "RANK");
    }
    e.size = read.Int(n.size, 1, kMaxInt, "a positive integer").value_or(0);
    if (e.size == 0) {
      throw InputError({"", 0, n.size}, fmt::format("not set, but {} is", n.rank),
                       "the launcher sets both; unset them to run one rank");
    }
    e.rank = *read.Int(n.rank, 0, e.size - 1,
                       fmt::format("a rank in [0, {}) ({} is {})", e.size, n.size, e.size));
    e.local_size =
        read.Int(n.local_size, 1, e.size, fmt::format("an integer in [1, {}]", e.size)).value_or(0);
    const int local_max = e.local_size > 0 ? e.local_size - 1 : e.size - 1;
    e.local_rank =
        read.Int(n.local_rank, 0, local_max, fmt::format("an integer in [0, {}]", local_max))
            .value_or(e.size == 1 ? 0 : -1);
    e.local_rank_variable = n.local_rank;
    if (e.local_rank < 0) {
      // Without it the GPU of a rank is unknown; guessing rank % GPUs would put two ranks on
      // one device on uneven nodes.
      throw InputError({"", 0, n.local_rank}, fmt::format("not set, but {} is", n.rank),
                       "the launcher sets the rank on the node; set it to the GPU of the rank");
    }
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
  if (env.local_rank < device_count) return env.local_rank;
  throw InputError(
      {"", 0, env.local_rank_variable.empty() ? "--backend" : env.local_rank_variable},
      fmt::format("rank {} is process {} on its node, which has {} GPU{}", env.rank, env.local_rank,
                  device_count, device_count == 1 ? "" : "s"),
      "start one process per GPU (NCCL refuses two ranks of a communicator on one GPU): e.g. "
      "srun --ntasks-per-node=<GPUs per node>");
}

}  // namespace ptdp
