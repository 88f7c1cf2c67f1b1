// `ptdp execute --launch`: start the ranks with mpirun instead of asking the user to.
//
// The command is `mpirun -np N [launcher flags] [extra args] <this ptdp> execute <args>`, with
// the mpirun of the MPI ptdp was built with. With OpenMPI the launcher flags make it work where
// ptdp's tests run: --oversubscribe (more ranks than cores), --bind-to none, --allow-run-as-root
// when running as root (OpenMPI refuses root otherwise), and -x OMP_NUM_THREADS=1
// -x OPENBLAS_NUM_THREADS=1 (one thread per rank; the CPU backend also sets OpenBLAS to one
// thread itself). Several machines: pass mpirun's own flags after `--`, e.g.
// `ptdp execute --plan p.yaml --launch -- --hostfile hosts`; under Slurm run
// `srun -n N ptdp execute --plan p.yaml` directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

struct LaunchCommand {
  std::vector<std::string> argv;  // argv[0] is the mpirun to run
};

LaunchCommand MakeLaunchCommand(int64_t ranks, const std::string& ptdp_executable,
                                const std::vector<std::string>& execute_args,
                                const std::vector<std::string>& extra_mpirun_args, bool as_root);

// Runs the command with stdin from /dev/null and the same stdout/stderr; waits and returns its
// exit status (128 + signal when killed by one). Throws InputError when it cannot be started.
int RunLaunchCommand(const LaunchCommand& command);

// This process's executable (/proc/self/exe), for the ranks to run.
std::string SelfExecutable();

// The mpirun ptdp was built with (CMake's MPIEXEC_EXECUTABLE), else "mpirun".
std::string MpiexecPath();

}  // namespace ptdp
