// Which launcher started this process, and where the process sits in its job, read from the
// environment the launcher sets (before MPI or NCCL starts):
//   mpirun (OpenMPI)   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   PMIx (OpenMPI 5, srun --mpi=pmix)   PMIX_RANK (+ the Slurm variables for the sizes)
//   PMI (MPICH's hydra, srun --mpi=pmi2)   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   torchrun-style (torchrun, Kubernetes' PyTorchJob, a Slurm script that exports them)
//                      RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   srun               SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// When several are set, the first in this order wins: a process that mpirun or an MPI-enabled
// srun started is an MPI rank; torchrun run inside an srun task sets RANK for each of the
// processes it starts, so it wins over the task's SLURM_PROCID.
//
// The GPU of a rank is its local rank (one process per GPU: NCCL refuses two ranks of one
// communicator on one device).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

namespace ptdp {

enum class Launcher { kNone, kOpenMpi, kPmix, kPmi, kTorchrun, kSlurm };
std::string_view Name(Launcher launcher);  // "none", "openmpi", "pmix", "pmi", "torchrun", "slurm"

struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = 0;                     // world rank, 0 <= rank < size
  int size = 1;                     // world size
  int local_rank = 0;               // rank among the processes of this node (the GPU it takes)
  int local_size = 1;               // processes on this node; 0 when the launcher does not say
  std::string local_rank_variable;  // the variable local_rank came from ("" without a launcher)
  // torchrun-style only: where rank 0's TCP store listens (tcp_store.h).
  std::string master_addr;
  int master_port = 0;
  // Whether ranks find each other through MPI (mpirun, PMIx, PMI, srun) rather than through
  // the TCP store at master_addr:master_port (torchrun-style).
  bool mpi() const { return launcher != Launcher::kNone && launcher != Launcher::kTorchrun; }
  // Spelled out: the CUDA sources (C++17) include this header.
  bool operator==(const LaunchEnv& o) const {
    return std::tie(launcher, rank, size, local_rank, local_size, local_rank_variable, master_addr,
                    master_port) == std::tie(o.launcher, o.rank, o.size, o.local_rank, o.local_size,
                                             o.local_rank_variable, o.master_addr, o.master_port);
  }
};

// The value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;
EnvLookup ProcessEnv();  // getenv

// Reads the launcher's variables. A value that is not a number in range, a rank outside
// [0, size), a torchrun-style set with a variable missing (RANK without WORLD_SIZE,
// MASTER_ADDR or MASTER_PORT) is an InputError naming the variable and its value:
//   `WORLD_SIZE: must be a positive integer, got "two"`.
// No launcher: a job of one rank (Launcher::kNone).
LaunchEnv ReadLaunchEnv(const EnvLookup& env);

// The CUDA device of this rank: device 0 when the process sees one device (the launcher bound
// a GPU to it: srun --gpus-per-task, --gpu-bind), else its local rank, which must be below the
// device count (one process per GPU); an InputError naming the local-rank variable otherwise.
// Two ranks on one GPU are NCCL's to refuse ("Duplicate GPU detected").
int GpuOfRank(const LaunchEnv& env, int device_count);

}  // namespace ptdp
