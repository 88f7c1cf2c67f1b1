// `ptdp validate`: executes a plan (CPU ranks, or GPUs with --backend cuda), simulates the same
// plan, and prints the two side by side (validation_report.h).
//
// Like `execute`, it runs as the job's ranks (`mpirun -np N ptdp validate ...`, or --launch to
// start mpirun itself); rank 0 compares once the executor is done, so the measured figures never
// pass through a file. The executor's step lines go to stderr, the comparison to stdout.
#include <fmt/format.h>

#include <set>
#include <thread>

#include "cli/cli.h"
#include "cli/cmd_execute.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/presets.h"
#include "executor/comm/mpi.h"
#include "simulator/simulate.h"
#include "validation/executor_report.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

enum class Format { kTable, kJson };
constexpr EnumName<Format> kFormats[] = {{"table", Format::kTable}, {"json", Format::kJson}};

// Flags --launch forwards to the ranks.
constexpr const char* kForwarded[] = {"watchdog", "plan",  "steps",   "backend",
                                      "data",     "trace", "results", "cluster",
                                      "format",   "dtype", "comm",    "attention-backend"};

void AddValidateOptions(po::options_description& o) {
  AddRunOptions(o);
  o.add_options()("cluster", po::value<std::string>()->value_name("C"),
                  "hardware profile to simulate with, a file (e.g. from `ptdp calibrate`) or a "
                  "preset (default: the plan's cluster section)")(
      "format", po::value<std::string>()->value_name("F"), "table (default) | json");
}

int RunValidate(const Flags& flags, std::ostream& out, std::ostream& err) {
  const bool quiet = LauncherRank() > 0;
  try {
    const Format format = flags.Enum("format", kFormats, Format::kTable);
    ExecuteOptions options = ReadExecuteOptions(flags);
    if (options.dtype == DType::kF64) {
      flags.Fail("dtype",
                 "validate runs fp32, bf16 or fp16, the precisions the simulator models (fp64 is "
                 "for `ptdp execute`'s numerical checks)");
    }
    options.keep_trace = true;           // the per-operation rows come from the trace events
    options.time_kernel_classes = true;  // and the per-class rows from the backend's clock
    const Plan plan = LoadExecutablePlan(flags, options);
    if (const int rc = CheckCudaRequest(flags, plan, "validate", err); rc != kExitOk) return rc;
    const auto cluster_arg = flags.OptionalString("cluster");
    const ClusterSpec cluster = cluster_arg ? ResolveCluster(*cluster_arg) : plan.cluster;
    if (flags.Switch("launch")) {
      // One process per GPU with --backend cuda: srun places the plan's GPUs per node.
      const int per_node = IsCudaRequest(flags) ? plan.cluster.gpus_per_node : 0;
      const LaunchCommand command =
          LaunchSelf("validate", plan.parallel.world_size(), flags, kForwarded, {}, per_node);
      std::string line;
      for (const std::string& a : command.argv) line += (line.empty() ? "" : " ") + a;
      err << "launching: " << line << "\n";
      err.flush();
      return RunLaunchCommand(command);
    }
    if (!flags.passthrough().empty()) {
      throw InputError({"", 0, "--"}, "mpirun arguments after -- need --launch");
    }
    auto compare = [&](const ExecuteResult& result, const JobInfo& job) {
      ValidationReport report;
      const Plan executed = ExecutedPlan(plan, options.dtype, cluster, job, &report.notes);
      const SimulationReport simulated = SimulatePlan(executed);
      std::vector<std::string> notes = std::move(report.notes);
      report = CompareRun(executed, result, simulated);
      report.notes = std::move(notes);
      if (result.profile_rank >= 0) {
        AddStandInRows(report, executed, simulated, job.stand_in);
        report.notes.push_back(
            "the rank ran alone: its exchanges were local copies of their size (their rows give "
            "the bytes against the simulator's and the copies' time, not a network's), so its "
            "busy time and micro-batch rows hold no network time while the simulator's do");
      }
      report.plan_path = flags.String("plan");
      report.backend = IsCudaRequest(flags) ? "cuda" : "cpu";
      report.profile_source =
          cluster_arg ? "--cluster " + *cluster_arg : "the plan's cluster section";
      report.hosts =
          static_cast<int>(std::set<std::string>(job.hosts.begin(), job.hosts.end()).size());
      if (!simulated.memory_problem.empty()) {
        report.notes.push_back("the simulator says a stage does not fit: " +
                               simulated.memory_problem);
      }
      out << (format == Format::kJson ? ValidationJson(report, simulated) : ValidationText(report));
      out.flush();
      return kExitOk;
    };
    return RunAsRank("validate", plan, options, flags, "", err, err, compare);
  } catch (const InputError&) {
    if (quiet) return kExitBadInput;
    throw;
  }
}

}  // namespace

const Command kValidateCommand{
    .name = "validate",
    .summary = "execute a plan, simulate it, and compare the two side by side",
    .usage =
        "ptdp validate --plan plan.yaml --launch [--steps S] [--cluster PROFILE]\n"
        "                     [--format table|json] [--data FILE|synthetic] [--results out.json]\n"
        "                     [--trace out.json] [--dtype fp32|bf16|fp16] [-- mpirun flags]\n"
        "       mpirun -np N ptdp validate --plan plan.yaml [flags]\n"
        "       ptdp validate --plan plan.yaml --profile-rank R [--cluster PROFILE] [flags]",
    .description =
        "Trains the plan on the executor as `ptdp execute` does (one rank per GPU of the plan:\n"
        "CPU ranks over MPI, or --backend cuda with one process per GPU over NCCL; --launch\n"
        "starts them), simulates the same plan with a hardware profile (--cluster,\n"
        "e.g. one that `ptdp calibrate` measured on this machine; default the plan's own), and\n"
        "prints measured against simulated: step time (median of the steps after the first),\n"
        "pipeline phase, bubble fraction, per pipeline stage the busy time, one micro-batch's\n"
        "forward and backward, the kernel time per step by class (GEMM, attention,\n"
        "memory-bound, optimizer; kernels only, no communication), and peak memory by\n"
        "category, with the ratio and error of each.\n"
        "\nThe simulation is of the plan as executed: in the precision it ran (--dtype: fp32,\n"
        "bf16 or fp16), the executor's communication (non-blocking sends; blocking\n"
        "tensor-parallel collectives but for the QKV and fc1 input gradients', beside their\n"
        "weight gradients as the plan's async_tensor_parallel_allreduce says; gradients\n"
        "reduced after the backward or, as the plan's overlap_grad_reduce says, bucket by\n"
        "bucket during it), and all ranks of a one-host job on one node. Per stage it also "
        "compares the data-parallel communication the\n"
        "stage waits for per step. Step lines go to stderr, the comparison to stdout.\n"
        "\n--profile-rank R runs rank R of a plan of any size alone in this process (no mpirun):\n"
        "its shapes, stage, micro-batches and schedule, every exchange a local copy of its\n"
        "size, and prints its stage's rows and, per group, the bytes its exchanges carried per\n"
        "step against the simulator's (e.g. one GPU checking the compute of a 3,072-GPU plan).\n"
        "Exits non-zero when the executor fails.",
    .examples =
        "ptdp calibrate --backend cpu --out cpu.yaml\n"
        "ptdp validate --plan plan.yaml --launch --steps 10 --cluster cpu.yaml\n"
        "ptdp validate --plan plan.yaml --launch --cluster cpu.yaml --format json > v.json",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddValidateOptions,
    .run = RunValidate,
};

}  // namespace ptdp::cli
