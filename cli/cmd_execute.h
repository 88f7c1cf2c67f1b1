// What `ptdp execute` and `ptdp validate` share: their flags, reading a plan the executor can
// run, running this process as one rank of the job, and starting mpirun for --launch.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/flags.h"
#include "core/plan.h"
#include "executor/launch/launch.h"
#include "executor/train/trainer.h"
#include "validation/executor_report.h"

namespace ptdp::cli {

// --plan --steps --backend --data --results --trace --dtype --launch --watchdog: the flags both
// commands take.
void AddRunOptions(boost::program_options::options_description& options);

// The executor's options from whichever of execute's flags `flags` declares (--steps, --data,
// --save, --save-interval, --save-overwrite, --load, --eval-interval, --trace, --dtype). --backend
// is cpu or cuda (IsCudaRequest: whether it is cuda; a value other than cpu or cuda is an
// InputError).
ExecuteOptions ReadExecuteOptions(const Flags& flags);
bool IsCudaRequest(const Flags& flags);
// Whether the ranks talk over NCCL: --backend cuda and --comm nccl (its default there); --comm
// mpi stages device memory through the host. A bad --comm is an InputError.
bool UsesNccl(const Flags& flags);

// Loads --plan and refuses (InputError naming the plan) what the CPU executor cannot run.
Plan LoadExecutablePlan(const Flags& flags, const ExecuteOptions& options);

// `mpirun -np ranks [execute --launch's launcher flags] [mpirun_args] <this ptdp> <subcommand>
// <args>`, or srun's or torchrun-style processes' (--launcher; executor/launch/launch.h): each of
// `forward` given on the command line is passed on as --name value. ranks_per_node: srun's
// --ntasks-per-node (0: Slurm's placement). calibrate keeps mpirun unless --launcher says.
LaunchCommand LaunchSelf(std::string_view subcommand, int64_t ranks, const Flags& flags,
                         std::span<const char* const> forward,
                         const std::vector<std::string>& extra_args = {}, int ranks_per_node = 0);

// This process's world rank from any launcher's environment (executor/launch/env.h), -1 when none
// set one; for choosing which rank reports an error on the command line.
int AnyLauncherRank();

// Before MPI starts: kExitOk when --backend (cpu, or cuda: one GPU) can run the plan here;
// else says why on `err` and returns the exit code (kExitNotImplemented for a cuda plan of
// several ranks, kExitFailed without a usable GPU). A bad --backend is an InputError.
int CheckCudaRequest(const Flags& flags, const Plan& plan, std::string_view command,
                     std::ostream& err);

// Run-wide facts rank 0 learns before training, for validate.
struct JobInfo {
  int world_size = 0;              // processes (1 for --profile-rank)
  std::vector<std::string> hosts;  // every process's host name
  // --profile-rank: what the rank's stand-in exchanges carried per measured step, by group.
  StandInTallies stand_in;
};

// The plan as the executor ran it, for the simulator: `cluster` the profile, the precision it
// computed in (`dtype`: fp32, bf16 or fp16), the attention it ran, the executor's software
// (ExecutorCostOptions), and every rank of a one-host job on one node; each adjustment a note.
Plan ExecutedPlan(const Plan& plan, DType dtype, const ClusterSpec& cluster, const JobInfo& job,
                  std::vector<std::string>* notes);

// Runs this process as one rank of a job of plan.parallel.world_size() ranks (MPI starts and
// ends here), or with options.profile_rank as that rank alone, its groups stand-ins
// (executor/comm/standin.h): trains, and on world rank 0 writes --results (default
// `default_results`, none when both are empty) and --trace, prints the run's lines to `log`, then
// returns on_root(result, job)'s exit code when on_root is set. Any rank's failure aborts the whole
// job (MPI_Abort) with its message on `err`; a wrong number of ranks is refused with exit code 2
// (the message names `ptdp <command>`).
int RunAsRank(std::string_view command, const Plan& plan, const ExecuteOptions& options,
              const Flags& flags, const std::string& default_results, std::ostream& log,
              std::ostream& err,
              const std::function<int(const ExecuteResult&, const JobInfo&)>& on_root);

}  // namespace ptdp::cli
