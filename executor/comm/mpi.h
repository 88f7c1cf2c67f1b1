// MPI communicators (OpenMPI on CPUs; any MPI-3 implementation should do). One process per
// rank; nothing here assumes one host: mpirun with a hostfile, or srun, places the ranks.
//
// Errors: MPI calls return their codes (MPI_ERRORS_RETURN) and PTDP_MPI_CHECK turns a failure
// into an MpiError naming the call, file:line, host and world rank, nccl-tests' CHECK habit.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "executor/comm/comm.h"

namespace ptdp {

class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Owns MPI's lifetime in this process: MPI_Init on construction, MPI_Finalize on destruction,
// when a launcher (mpirun, srun: LauncherRank() >= 0) started the process or PTDP_MPI=1; else
// the process is a job of one rank without MPI (World() is a one-rank LocalComm). At most one
// per process (MPI cannot be initialised twice).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  const std::string& host() const { return host_; }

  // MPI_COMM_WORLD as a Comm over `backend`'s memory. MPI moves host memory: a device
  // backend's spans (CUDA) are copied to the host and back around every exchange, which is
  // slow but needs no NCCL and lets several processes share one GPU (tests).
  std::unique_ptr<Comm> World(Backend& backend) const;

 private:
  bool initialized_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::string host_;
};

// MPI_Abort on MPI_COMM_WORLD: every rank of the job ends with `code`. For the CLI's fault path;
// never returns. Safe to call when MPI is not initialised (then it only exits).
[[noreturn]] void MpiAbortJob(int code);

// This process's world rank from an MPI launcher's environment (OMPI_COMM_WORLD_RANK,
// PMIX_RANK, PMI_RANK, SLURM_PROCID; executor/launch/env.h), without initialising MPI; -1 when none
// is set, or when a torchrun-style launch (RANK, WORLD_SIZE, ...) started the process.
int LauncherRank();

// "PTDP_MPI_CHECK(MPI_Allreduce(...))": throws MpiError("MPI_Allreduce(...) failed at
// executor/comm/mpi.cc:123 on host h, rank 3: <MPI's error string>").
void ThrowMpiError(int code, const char* call, const char* file, int line);
#define PTDP_MPI_CHECK(call)                                                     \
  do {                                                                           \
    const int ptdp_mpi_rc = (call);                                              \
    if (ptdp_mpi_rc != 0) ThrowMpiError(ptdp_mpi_rc, #call, __FILE__, __LINE__); \
  } while (0)

}  // namespace ptdp
