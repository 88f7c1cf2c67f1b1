// The launch room (executor/launch/): where a process sits in its job (env.h), how its ranks are
// started (this file) and how they meet without MPI (tcp_store.h); it includes no other room.
//
// `ptdp execute --launch`: start the ranks instead of asking the user to, with one of three
// launchers (--launcher; the default is srun inside a Slurm allocation, else mpirun):
//  - mpirun (below);
//  - srun: `srun --ntasks N [--ntasks-per-node G] --kill-on-bad-exit=1 [extra args] <this ptdp>
//    execute <args>`, G the plan's GPUs per node for --backend cuda (one process per GPU), so a
//    rank that fails ends the job; srun's own flags (--mpi=pmix, --gpus-per-node, ...) after `--`;
//  - torchrun: on this node only, N copies of ptdp with torchrun's variables (RANK, WORLD_SIZE,
//    LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT a free port): the NCCL
//    bootstrap over the TCP store, without MPI (env.h); when one ends with an error the
//    others are stopped (SIGTERM). Several nodes: run torchrun or a Slurm script that sets the
//    variables (results/cluster).
//
// The mpirun command is `mpirun -np N [launcher flags] [extra args] <this ptdp> execute <args>`,
// with the mpirun of the MPI ptdp was built with. With OpenMPI the launcher flags make it work
// where ptdp's tests run: --oversubscribe (more ranks than cores), --bind-to none,
// --allow-run-as-root when running as root (OpenMPI refuses root otherwise), and -x
// OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 (one thread per rank; the CPU backend also sets
// OpenBLAS to one thread itself). Several machines: pass mpirun's own flags after `--`, e.g. `ptdp
// execute --plan p.yaml --launch -- --hostfile hosts`; inside a Slurm allocation --launch runs
// srun.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ptdp {

enum class Launcher;  // env.h

struct LaunchCommand {
  std::vector<std::string> argv;  // argv[0] is the program to run (mpirun, srun, or ptdp)
  // torchrun-style: one process per entry, each with these NAME=VALUE variables set (and the
  // MPI launchers' rank variables removed); empty: one process, which starts the ranks.
  std::vector<std::vector<std::string>> rank_env;
};

LaunchCommand MakeLaunchCommand(int64_t ranks, const std::string& ptdp_executable,
                                const std::vector<std::string>& execute_args,
                                const std::vector<std::string>& extra_mpirun_args, bool as_root);

// srun's command; ranks_per_node 0 leaves the placement to Slurm.
LaunchCommand MakeSrunCommand(int64_t ranks, int ranks_per_node, const std::string& ptdp_executable,
                              const std::vector<std::string>& execute_args,
                              const std::vector<std::string>& extra_srun_args);

// torchrun-style processes on this node, the TCP store on 127.0.0.1:master_port.
LaunchCommand MakeLocalTorchrunCommand(int64_t ranks, int master_port,
                                       const std::string& ptdp_executable,
                                       const std::vector<std::string>& execute_args);

// --launcher's value: mpirun | srun | torchrun (Launcher::kOpenMpi, kSlurm, kTorchrun);
// unset: srun when SLURM_JOB_ID is set (inside an allocation), else mpirun. Another value is
// an InputError naming --launcher.
Launcher ChooseLauncher(const std::optional<std::string>& flag,
                        const std::optional<std::string>& slurm_job_id);

// The command as one line, for the user: argv, and for torchrun-style the variables
// ("RANK=0..3 WORLD_SIZE=4 ... ptdp execute ...").
std::string DescribeLaunch(const LaunchCommand& command);

// Runs the command (every process of rank_env) with stdin from /dev/null and the same
// stdout/stderr; waits and returns the exit status (128 + signal when killed by one); of
// several processes, the first that failed, the others being stopped. Throws InputError when
// it cannot be started.
int RunLaunchCommand(const LaunchCommand& command);

// A TCP port that was free a moment ago (bound and closed), for a local TCP store.
int FreeLocalPort();

// This process's executable (/proc/self/exe), for the ranks to run.
std::string SelfExecutable();

// The mpirun ptdp was built with (CMake's MPIEXEC_EXECUTABLE), else "mpirun".
std::string MpiexecPath();

}  // namespace ptdp
