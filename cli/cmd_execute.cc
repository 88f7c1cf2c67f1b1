// `ptdp execute`: trains a plan's GPT with its exact layout, one process per rank under mpirun
// (or starts mpirun itself with --launch). The rank machinery here (cmd_execute.h) also runs
// `ptdp validate`'s ranks.
//
// Faults: after MPI is up, any error on any rank is printed with the rank and host, and the
// whole job is ended with MPI_Abort, so a failing rank never leaves the others waiting.
#include "cli/cmd_execute.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "core/error.h"
#include "core/limits.h"
#include "core/spec_yaml.h"
#include "core/text.h"
#include "core/trace.h"
#include "executor/backend/cpu.h"
#include "executor/backend/cuda.h"
#include "executor/backend/device.h"
#include "executor/comm/mpi.h"
#include "executor/comm/nccl.h"
#include "executor/comm/standin.h"
#include "executor/comm/topology.h"
#include "executor/launch/env.h"
#include "executor/launch/launch.h"
#include "executor/launch/tcp_store.h"
#include "executor/train/checkpoint.h"
#include "executor/train/trainer.h"
#include "megatron/plan_file.h"
#include "simulator/simulate.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

constexpr EnumName<DType> kDTypes[] = {
    {"fp32", DType::kF32}, {"bf16", DType::kBF16}, {"fp16", DType::kF16}, {"fp64", DType::kF64}};

// Flags `execute --launch` forwards to the ranks (all but --launch itself).
constexpr const char* kForwarded[] = {
    "watchdog",          "plan", "steps", "backend", "data",  "save",
    "save-interval",     "load", "trace", "results", "dtype", "eval-interval",
    "attention-backend", "comm"};

void AddExecuteOptions(po::options_description& o) {
  AddRunOptions(o);
  o.add_options()("save", po::value<std::string>()->value_name("DIR"), "checkpoint directory")(
      "save-interval", po::value<std::string>()->value_name("K"),
      "checkpoint every K steps (and after the last)")(
      "load", po::value<std::string>()->value_name("DIR"),
      "resume from a checkpoint (the same run: saves go on under its run id)")(
      "save-overwrite", po::bool_switch(),
      "save into a --save folder that holds another run's checkpoints (refused without it, so "
      "that two runs' checkpoints never mix): this run's saves replace that run's of the same "
      "steps, and `latest` moves to this run's")(
      "eval-interval", po::value<std::string>()->value_name("K"),
      "validation loss (held-out 10% of the data) every K steps; always after the last");
}

// The file's device and inode ({0, 0} when there is none).
std::pair<dev_t, ino_t> FileId(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

// PTDP_TEST_FAULT's killpartial: at step `step`'s save, SIGKILL in the middle of writing this
// rank's file once every lower rank's file of that save is in place. A file of an earlier save
// may stand where a lower rank writes; that rank's rename replaces it with another inode.
std::function<void(int64_t, std::string_view)> KillAfterLowerRanksFiles(int64_t step, int rank,
                                                                        std::string dir) {
  auto before = std::make_shared<std::vector<std::pair<dev_t, ino_t>>>();
  return [step, rank, dir, before](int64_t now, std::string_view phase) {
    if (now != step) return;
    if (phase == "save begun") {  // before any rank writes
      before->clear();
      for (int r = 0; r < rank; ++r) before->push_back(FileId(CheckpointRankFilePath(dir, now, r)));
      return;
    }
    if (phase != "rank file half written") return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int r = 0; r < rank && std::chrono::steady_clock::now() < deadline;) {
      const auto id = FileId(CheckpointRankFilePath(dir, now, r));
      if (id.second != 0 && id != (*before)[static_cast<size_t>(r)]) {
        ++r;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    ::raise(SIGKILL);
  };
}

// PTDP_TEST_FAULT="RANK:STEP[:MODE]": world rank RANK fails in step STEP. MODE throw: it
// throws before the step (the error path); midstep: throws after its second pipeline operation
// (with messages in flight); exit: exits at once without MPI_Finalize (a crashed process);
// stop: stops itself (SIGSTOP) before the step, a hung process the others wait on;
// kill: SIGKILL after its second pipeline operation; killsave: SIGKILL in the middle of writing
// its file of step STEP's checkpoint; killpartial: the same, once the file of every lower rank
// of that save is in place (deterministic: ranks 0..RANK-1's files written, RANK's not; with
// RANK the last rank, exactly RANK files); killcommit: SIGKILL when every rank's file of that
// save is written, before the manifest. For tests only: nothing reads PTDP_TEST_FAULT but this
// function, and it changes nothing when unset.
void InstallFaultHooks(int world_rank, ExecuteOptions* options) {
  const char* spec = std::getenv("PTDP_TEST_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  int rank = -1;
  long long step = -1;
  char mode[16] = "throw";
  if (std::sscanf(spec, "%d:%lld:%15s", &rank, &step, mode) < 2) {
    throw InputError({"", 0, "PTDP_TEST_FAULT"},
                     fmt::format("expected RANK:STEP[:MODE], got \"{}\"", spec));
  }
  if (rank != world_rank) return;
  const std::string how = mode;
  constexpr std::string_view kModes[] = {"throw", "midstep",  "exit",        "stop",
                                         "kill",  "killsave", "killpartial", "killcommit"};
  if (std::find(std::begin(kModes), std::end(kModes), how) == std::end(kModes)) {
    throw InputError(
        {"", 0, "PTDP_TEST_FAULT"},
        "mode must be throw, midstep, exit, stop, kill, killsave, killpartial or killcommit");
  }
  if (how == "killpartial") {
    options->on_save = KillAfterLowerRanksFiles(step, rank, options->save_dir);
    return;
  }
  options->on_step_begin = [step, how, rank](int64_t now) {
    if (now != step || how != "throw") {
      if (now == step && how == "exit") std::_Exit(7);
      if (now == step && how == "stop") ::raise(SIGSTOP);
      return;
    }
    throw std::runtime_error(
        fmt::format("injected fault before step {} on rank {} (PTDP_TEST_FAULT)", step, rank));
  };
  options->on_operation = [step, how, rank](int64_t now, int64_t op) {
    if (now != step || op != 2) return;
    if (how == "kill") ::raise(SIGKILL);
    if (how != "midstep") return;
    throw std::runtime_error(fmt::format(
        "injected fault after operation 2 of step {} on rank {} (PTDP_TEST_FAULT)", step, rank));
  };
  options->on_save = [step, how](int64_t now, std::string_view phase) {
    if (now != step) return;
    if ((how == "killsave" && phase == "rank file half written") ||
        (how == "killcommit" && phase == "rank files written")) {
      ::raise(SIGKILL);
    }
  };
}

// Ends the job when this rank makes no progress (no step begun, no pipeline operation done, no
// checkpoint phase passed) for `seconds`: a peer stopped (SIGSTOP), hung or dead leaves the
// others waiting in MPI forever otherwise, as PyTorch's NCCL watchdog knows. The rank says so on
// stderr and exits at once without MPI_Finalize, which makes mpirun end every rank.
class Watchdog {
 public:
  Watchdog(int64_t seconds, std::string who) : seconds_(seconds), who_(std::move(who)) {
    Beat(0, 0);
    if (seconds_ > 0) thread_ = std::thread([this] { Watch(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Beat(int64_t step, int64_t operation) {
    step_.store(step, std::memory_order_relaxed);
    operation_.store(operation, std::memory_order_relaxed);
    last_ns_.store(NowNs(), std::memory_order_release);
  }

  // Wraps the options' hooks so that every step, operation and checkpoint phase is a beat.
  void Install(ExecuteOptions& options) {
    auto step_hook = options.on_step_begin;
    options.on_step_begin = [this, step_hook](int64_t step) {
      Beat(step, 0);
      if (step_hook) step_hook(step);
    };
    auto operation_hook = options.on_operation;
    options.on_operation = [this, operation_hook](int64_t step, int64_t operation) {
      Beat(step, operation);
      if (operation_hook) operation_hook(step, operation);
    };
    auto save_hook = options.on_save;
    options.on_save = [this, save_hook](int64_t step, std::string_view phase) {
      Beat(step, operation_.load(std::memory_order_relaxed));
      if (save_hook) save_hook(step, phase);
    };
  }

 private:
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void Watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto tick = std::chrono::milliseconds(std::min<int64_t>(1000, seconds_ * 250));
    while (!wake_.wait_for(lock, tick, [this] { return stop_; })) {
      const double idle =
          static_cast<double>(NowNs() - last_ns_.load(std::memory_order_acquire)) / 1e9;
      if (idle < static_cast<double>(seconds_)) continue;
      const int64_t step = step_.load(std::memory_order_relaxed);
      const int64_t operation = operation_.load(std::memory_order_relaxed);
      const std::string where =
          step == 0        ? "before the first step"
          : operation == 0 ? fmt::format("at the start of step {}", step)
                           : fmt::format("in step {} after pipeline operation {}", step, operation);
      const std::string message = fmt::format(
          "ptdp: error: {}: no progress for {} s ({}); another rank may be stopped, hung or dead: "
          "ending the job (--watchdog)\n",
          who_, seconds_, where);
      std::fputs(message.c_str(), stderr);
      std::fflush(stderr);
      std::_Exit(kExitFailed);
    }
  }

  const int64_t seconds_;
  const std::string who_;
  std::atomic<int64_t> last_ns_{0}, step_{0}, operation_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// --save DIR holding another run's checkpoints is refused before anything runs: the run's id
// is the --load checkpoint's (resuming is the same run) or new (checkpoint.h).
void CheckSaveTarget(const ExecuteOptions& options) {
  if (options.save_dir.empty()) return;
  const bool resumes_here = ResumesFromFolder(options.load_dir, options.save_dir);
  if (options.save_overwrite || resumes_here) return;
  const std::string run_id = options.load_dir.empty() ? "" : CheckpointRunId(options.load_dir);
  CheckSaveFolder(options.save_dir, run_id, /*replace_other_runs=*/false);
}

int RunExecute(const Flags& flags, std::ostream& out, std::ostream& err) {
  // Before MPI: every rank reads and checks the same plan; only rank 0 (or a lone process)
  // reports a problem, the others exit with the same code.
  const bool quiet = AnyLauncherRank() > 0;
  try {
    const ExecuteOptions options = ReadExecuteOptions(flags);
    const Plan plan = LoadExecutablePlan(flags, options);
    if (const int rc = CheckCudaRequest(flags, plan, "execute", err); rc != kExitOk) return rc;
    if (!flags.Has("results")) CheckOutputPath("execute-results.json", "--results");
    CheckSaveTarget(options);
    if (flags.Switch("launch")) {
      // One process per GPU with --backend cuda: srun places the plan's GPUs per node.
      const int per_node = IsCudaRequest(flags) ? plan.cluster.gpus_per_node : 0;
      std::vector<std::string> switches;
      if (options.save_overwrite) switches.push_back("--save-overwrite");
      const LaunchCommand command =
          LaunchSelf("execute", plan.parallel.world_size(), flags, kForwarded, switches, per_node);
      out << "launching: " << DescribeLaunch(command) << "\n";
      out.flush();
      return RunLaunchCommand(command);
    }
    if (!flags.passthrough().empty()) {
      throw InputError({"", 0, "--"}, "launcher arguments after -- need --launch");
    }
    return RunAsRank("execute", plan, options, flags, "execute-results.json", out, err, nullptr);
  } catch (const InputError&) {
    if (quiet) return kExitBadInput;
    throw;
  }
}

}  // namespace

void AddRunOptions(po::options_description& o) {
  o.add_options()("plan", po::value<std::string>()->value_name("FILE"), "plan file to execute")(
      "steps", po::value<std::string>()->value_name("S"),
      "train until step S (default 10; a resumed run continues to S)")(
      "backend", po::value<std::string>()->value_name("B"), "cpu (default) | cuda")(
      "data", po::value<std::string>()->value_name("FILE"),
      "text file of byte tokens (default /usr/share/common-licenses/GPL-3), or `synthetic`")(
      "trace", po::value<std::string>()->value_name("FILE"), "write a measured Chrome trace")(
      "dtype", po::value<std::string>()->value_name("T"),
      "fp32 (default) | bf16 | fp16 (Megatron's mixed precision: 16-bit weights and "
      "activations, fp32 main weights, gradients and optimizer state; fp16 with dynamic loss "
      "scaling) | fp64 (execute only: numerical checks)")(
      "results", po::value<std::string>()->value_name("FILE"),
      "results JSON to write (execute: default execute-results.json)")(
      "launch", po::bool_switch(),
      "start the ranks, one per GPU of the plan (the launcher's own flags after a lone --)")(
      "launcher", po::value<std::string>()->value_name("L"),
      "with --launch: mpirun | srun | torchrun (default: srun inside a Slurm allocation, i.e. "
      "with SLURM_JOB_ID set, else mpirun). srun: one task per rank, --ntasks-per-node the "
      "plan's GPUs per node with --backend cuda; torchrun: processes on this node with "
      "torchrun's variables, NCCL bootstrapped over a TCP store (--backend cuda)")(
      "watchdog", po::value<std::string>()->value_name("S"),
      "end the job when a rank makes no progress for S seconds (a stopped, hung or dead peer); "
      "default 600, `off` to wait forever")(
      "profile-rank", po::value<std::string>()->value_name("R"),
      "run rank R of the plan alone on this machine's one device (its shapes, stage, "
      "micro-batches and schedule; every exchange a local copy of the right size, timed "
      "apart) and compare it with the cost model; no mpirun")(
      "comm", po::value<std::string>()->value_name("C"),
      "how ranks on GPUs talk: nccl (default; one process per GPU) | mpi (MPI over host copies "
      "of the device memory: slower, and several processes may share a GPU; for tests and "
      "machines without NCCL). CPU ranks talk over MPI")(
      "attention-backend", po::value<std::string>()->value_name("A"),
      "the attention to run, overriding the plan's options.attention: flash | fused (both "
      "flash-style: the log-sum-exp kept, the softmax recomputed in the backward) | unfused "
      "(the softmax kept)");
}

int64_t ReadWatchdogSeconds(const Flags& flags) {
  const auto text = flags.OptionalString("watchdog");
  if (text && *text == "off") return 0;
  return flags.OptionalPositiveInt("watchdog", kMaxWatchdogSeconds).value_or(600);
}

bool IsCudaRequest(const Flags& flags) {
  const std::string backend = flags.OptionalString("backend").value_or("cpu");
  if (backend == "cuda") return true;
  if (backend != "cpu") {
    flags.Fail("backend", fmt::format("expected cpu or cuda, got \"{}\"", backend));
  }
  return false;
}

bool UsesNccl(const Flags& flags) {
  const auto comm = flags.OptionalString("comm");
  if (comm && *comm != "nccl" && *comm != "mpi") {
    flags.Fail("comm", fmt::format("expected nccl or mpi, got \"{}\"", *comm));
  }
  const bool cuda = IsCudaRequest(flags);
  if (comm && *comm == "nccl" && !cuda) {
    flags.Fail("comm", "NCCL moves GPU memory: it needs --backend cuda",
               "CPU ranks talk over MPI (the default)");
  }
  return cuda && comm.value_or("nccl") == "nccl";
}

ExecuteOptions ReadExecuteOptions(const Flags& flags) {
  (void)ReadWatchdogSeconds(flags);  // refused before anything starts
  (void)UsesNccl(flags);             // a bad --comm: exit 2 naming it
  if (const auto launcher = flags.OptionalString("launcher")) {
    (void)ChooseLauncher(launcher, std::nullopt);  // an unknown value: exit 2 naming --launcher
    if (!flags.Switch("launch")) flags.Fail("launcher", "needs --launch");
  }
  ExecuteOptions options;
  options.steps = flags.OptionalPositiveInt("steps").value_or(10);
  options.data = flags.OptionalString("data").value_or("");
  options.save_dir = flags.OptionalString("save").value_or("");
  options.save_interval = flags.OptionalPositiveInt("save-interval").value_or(0);
  if (options.save_interval > 0 && options.save_dir.empty()) {
    flags.Fail("save-interval", "needs --save DIR");
  }
  options.load_dir = flags.OptionalString("load").value_or("");
  options.save_overwrite = flags.Switch("save-overwrite");
  if (options.save_overwrite && options.save_dir.empty()) {
    flags.Fail("save-overwrite", "needs --save DIR");
  }
  options.eval_interval = flags.OptionalPositiveInt("eval-interval").value_or(0);
  options.keep_trace = flags.Has("trace");
  // fp32 unless asked: the plan's precision (bf16 in Megatron's recipes) is the GPU's; the run
  // says which dtype it computes in.
  options.dtype = flags.Enum("dtype", kDTypes, DType::kF32);
  if (const auto rank = flags.OptionalString("profile-rank")) {
    const bool digits = !rank->empty() && rank->size() <= 9 &&
                        rank->find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      flags.Fail("profile-rank", fmt::format("expected a rank, 0 or more, got \"{}\"", *rank));
    options.profile_rank = std::stoi(*rank);
    for (const std::string& given : flags.Given()) {
      if (given == "launch" || given == "save" || given == "load" || given == "save-interval" ||
          given == "save-overwrite") {
        flags.Fail("profile-rank", fmt::format("runs one rank alone without mpirun or "
                                               "checkpoints: drop --{}",
                                               given));
      }
    }
    options.keep_trace = true;           // its per-micro-batch figures come from the trace
    options.time_kernel_classes = true;  // and its kernel classes from the clock
  }
  // A GPU holds one rank: its memory bounds the plan, not this machine's (checked again, with
  // the reason, when the backend starts).
  if (IsCudaRequest(flags)) {
    const CudaStatus gpu = QueryCuda();
    options.device_memory_bytes = gpu.usable ? gpu.memory_bytes : -1;
  }
  return options;
}

Plan LoadExecutablePlan(const Flags& flags, const ExecuteOptions& options) {
  const std::string plan_path = flags.String("plan");
  Plan plan = LoadPlanFile(plan_path);
  if (options.profile_rank >= plan.parallel.world_size()) {
    flags.Fail("profile-rank",
               fmt::format("the plan has {} ranks (0..{})", plan.parallel.world_size(),
                           plan.parallel.world_size() - 1));
  }
  plan.options.attention =
      flags.Enum("attention-backend", kAttentionBackendNames, plan.options.attention);
  const std::vector<std::string> problems = CheckExecutable(plan, options);
  if (!problems.empty()) {
    std::string more;
    for (size_t i = 1; i < problems.size(); ++i) more += "\n  also: " + problems[i];
    throw InputError({plan_path, 0, ""}, problems.front() + more);
  }
  return plan;
}

LaunchCommand LaunchSelf(std::string_view subcommand, int64_t ranks, const Flags& flags,
                         std::span<const char* const> forward,
                         const std::vector<std::string>& extra_args, int ranks_per_node) {
  std::vector<std::string> args;
  for (const char* name : forward) {
    if (const auto value = flags.OptionalString(name)) {
      args.push_back(std::string("--") + name);
      args.push_back(*value);
    }
  }
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  // calibrate's MPI measurement between CPU ranks keeps mpirun unless told otherwise.
  const char* job = std::getenv("SLURM_JOB_ID");
  const Launcher launcher = ChooseLauncher(
      flags.OptionalString("launcher"),
      subcommand == "calibrate" || job == nullptr ? std::nullopt : std::optional<std::string>(job));
  LaunchCommand command;
  if (launcher == Launcher::kSlurm) {
    command = MakeSrunCommand(ranks, ranks_per_node, SelfExecutable(), args, flags.passthrough());
  } else if (launcher == Launcher::kTorchrun) {
    if (!IsCudaRequest(flags)) {
      flags.Fail("launcher",
                 "torchrun-style ranks bootstrap NCCL over a TCP store: they need --backend cuda",
                 "CPU ranks talk over MPI: --launcher mpirun or srun");
    }
    if (!flags.passthrough().empty()) {
      flags.Fail("launcher",
                 "torchrun-style ranks on this node take no launcher arguments after --");
    }
    command = MakeLocalTorchrunCommand(ranks, FreeLocalPort(), SelfExecutable(), args);
  } else {
    command = MakeLaunchCommand(ranks, SelfExecutable(), args, flags.passthrough(), geteuid() == 0);
  }
  // The commands start `execute`; their launcher flags serve the other subcommands too.
  const size_t at = command.argv.size() - args.size() - 1;
  PTDP_CHECK(command.argv[at] == "execute");
  command.argv[at] = std::string(subcommand);
  return command;
}

int AnyLauncherRank() {
  try {
    const LaunchEnv env = ReadLaunchEnv(ProcessEnv());
    if (env.launcher != Launcher::kNone) return env.rank;
  } catch (const InputError&) {
    // Reported where the rank reads its environment (RunAsRank).
  }
  return LauncherRank();
}

int CheckCudaRequest(const Flags& flags, const Plan& plan, std::string_view command,
                     std::ostream& err) {
  if (!IsCudaRequest(flags)) return kExitOk;
  const CudaStatus status = QueryCuda();
  if (plan.parallel.world_size() == 1 || flags.Has("profile-rank")) {
    if (status.usable) return kExitOk;
    err << fmt::format("ptdp: error: `ptdp {} --backend cuda` needs a GPU: {}\n", command,
                       status.reason);
    return kExitFailed;
  }
  // Several GPUs, one process each, over NCCL. The launching process may have no GPU (a Slurm
  // login node): each rank checks its own.
  if (status.built) return kExitOk;
  err << fmt::format(
      "ptdp: error: `ptdp {} --backend cuda` needs CUDA and NCCL: {} (--backend cpu runs the "
      "plan on CPUs)\n",
      command, status.reason);
  return kExitFailed;
}

// The rank's backend: the CPU, or (--backend cuda) the GPU of its local rank.
std::unique_ptr<Backend> MakeBackend(const Flags& flags, const LaunchEnv& env) {
  if (!IsCudaRequest(flags)) return MakeCpuBackend(1);
  const CudaStatus status = QueryCuda();
  if (!status.usable) throw std::runtime_error("--backend cuda needs a GPU: " + status.reason);
  std::string error;
  std::unique_ptr<Backend> backend = MakeCudaBackend(GpuOfRank(env, status.device_count), &error);
  if (backend == nullptr) throw std::runtime_error("--backend cuda: " + error);
  return backend;
}

Plan ExecutedPlan(const Plan& plan, DType dtype, const ClusterSpec& cluster, const JobInfo& job,
                  std::vector<std::string>* notes) {
  Plan executed = plan;
  executed.cluster = cluster;
  executed.options = ExecutorCostOptions();
  // The executor runs the plan's attention: unfused keeps the softmax, flash and fused run its
  // flash-style kernel (executor/model/context_parallel.h FlashAttentionForward), as the
  // context-parallel blocks do (Megatron's rules refuse context parallelism with unfused
  // attention).
  executed.options.attention = plan.options.attention;
  // It overlaps the data-parallel exchanges as the plan says, with the plan's buckets, and the
  // column-parallel input gradients' reduction with their weight gradients.
  executed.options.async_tensor_parallel_allreduce = plan.options.async_tensor_parallel_allreduce;
  executed.options.overlap_grad_reduce = plan.options.overlap_grad_reduce;
  executed.options.overlap_param_gather = plan.options.overlap_param_gather;
  executed.options.ddp_bucket_size = plan.options.ddp_bucket_size;
  if (plan.options.attention == AttentionBackend::kFused) {
    notes->push_back(
        "the CPU executor's flash-style kernel stands for cuDNN's fused attention; simulated as "
        "the flash kernel");
    executed.options.attention = AttentionBackend::kFlash;
  }
  const Precision ran = dtype == DType::kBF16  ? Precision::kBf16
                        : dtype == DType::kF16 ? Precision::kFp16
                                               : Precision::kFp32;
  if (executed.training.precision != ran) {
    notes->push_back(fmt::format("the executor computed in {}; simulated in {}, not the plan's {}",
                                 Name(dtype), Name(ran), Name(plan.training.precision)));
    executed.training.precision = ran;
  }
  const std::set<std::string> hosts(job.hosts.begin(), job.hosts.end());
  if (hosts.size() != 1) return executed;
  if (executed.cluster.gpus_per_node < job.world_size) {
    notes->push_back(
        fmt::format("all {} ranks ran on one host: simulated on one node of {} (the "
                    "profile says {} per node)",
                    job.world_size, job.world_size, cluster.gpus_per_node));
    executed.cluster.gpus_per_node = job.world_size;
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores > 0 && job.world_size > cores) {
    notes->push_back(fmt::format("{} ranks shared {} cores; the simulator gives each rank a core",
                                 job.world_size, cores));
  }
  return executed;
}

namespace {

// `ptdp execute --profile-rank`: the rank's micro-batch against the cost model with the plan's
// own profile, and what its exchanges carried.
void PrintProfiledRank(const Plan& plan, const ExecuteOptions& options, const ExecuteResult& result,
                       const JobInfo& job, std::ostream& log) {
  std::vector<std::string> notes;
  const Plan executed = ExecutedPlan(plan, options.dtype, plan.cluster, job, &notes);
  const SimulationReport sim = SimulatePlan(executed);
  ValidationReport v = CompareRun(executed, result, sim);
  AddStandInRows(v, executed, sim, job.stand_in);
  const StageComparison& s = v.stages.at(0);
  log << fmt::format(
      "rank {} (stage {}), one micro-batch per model chunk: forward {} (cost model {}, {}), "
      "backward {} (cost model {}, {}); cost model with the plan's profile {}, as executed ({})\n",
      options.profile_rank, s.stage, Seconds(s.forward_s.measured), Seconds(s.forward_s.simulated),
      ErrorCell(s.forward_s), Seconds(s.backward_s.measured), Seconds(s.backward_s.simulated),
      ErrorCell(s.backward_s), plan.cluster.name, Name(options.dtype));
  std::string exchanges;
  // The groups in the order the report lists them (tp, cp, ep, etp, pp, dp_cp, ...).
  for (const StandInComparison& g : v.stand_in) {
    if (g.calls == 0) continue;
    exchanges +=
        fmt::format("{}{} {:.2f} MB ({} call{}, {})", exchanges.empty() ? "" : "; ", g.group,
                    g.bytes.measured / 1e6, g.calls, g.calls == 1 ? "" : "s", Seconds(g.seconds));
  }
  if (!exchanges.empty()) log << "stand-in exchanges per step: " << exchanges << "\n";
  log << fmt::format(
      "compare every figure with `ptdp validate --plan PLAN --profile-rank {} [--cluster "
      "PROFILE]`\n",
      options.profile_rank);
}

}  // namespace

// The world communicator: MPI's for CPU ranks; NCCL's for several GPUs, its unique id sent over
// MPI (mpirun, srun) or over the TCP store (torchrun-style; *store keeps it served). A rank
// whose NCCL operation hangs past --watchdog says so and ends (the others' watchdogs end
// them, or the launcher does).
std::unique_ptr<Comm> MakeWorld(const MpiSession& session, const LaunchEnv& env, Backend& backend,
                                const Flags& flags, std::unique_ptr<TcpStore>* store) {
  const bool torchrun = env.launcher == Launcher::kTorchrun;
  const int size = torchrun ? env.size : session.world_size();
  const int rank = torchrun ? env.rank : session.world_rank();
  if (torchrun && !UsesNccl(flags)) {
    flags.Fail("comm", "a torchrun-style launch has no MPI: its ranks talk over NCCL",
               "start the ranks with mpirun or srun for --comm mpi");
  }
  // MPI (CPU ranks, or --comm mpi: device memory staged through the host) or one rank.
  if (!UsesNccl(flags) || size == 1) return session.World(backend);
  const int64_t watchdog_s = ReadWatchdogSeconds(flags);
  NcclOptions nccl;
  nccl.timeout_s =
      watchdog_s > 0 ? static_cast<double>(watchdog_s) : std::numeric_limits<double>::infinity();
  nccl.on_timeout = [](const std::string& message) {
    std::fputs(("ptdp: error: " + message + "\n").c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(kExitFailed);
  };
  std::unique_ptr<Comm> mpi_world;
  IdExchange exchange;
  if (torchrun) {
    TcpStoreOptions o;
    o.host = env.master_addr;
    o.port = env.master_port;
    o.rank = env.rank;
    o.world_size = env.size;
    o.timeout_s = std::min(nccl.timeout_s, 600.0);
    *store = std::make_unique<TcpStore>(o);
    exchange = IdOverStore(**store, "ptdp/nccl-world-id", kNcclIdBytes);
  } else {
    mpi_world = session.World(backend);  // only its Broadcast of host bytes is used
    exchange = IdOverComm(*mpi_world, kNcclIdBytes);
  }
  std::string error;
  std::unique_ptr<Comm> world = MakeNcclWorld(backend, rank, size, exchange, nccl, &error);
  if (world == nullptr) throw std::runtime_error("--backend cuda: " + error);
  return world;
}

namespace {

// Whether the launcher started the ranks the plan needs (or the one process of --profile-rank);
// if not, world rank 0 says what to run instead.
bool StartedRanksFit(std::string_view command, const Plan& plan, const ExecuteOptions& options,
                     const Flags& flags, int world_size, bool root, std::ostream& err) {
  const bool profile = options.profile_rank >= 0;
  if (profile && world_size != 1) {
    if (root) {
      err << fmt::format(
          "ptdp: error: --profile-rank runs rank {} alone in one process, but {} started: run "
          "`ptdp {} --plan {} --profile-rank {}` without a launcher\n",
          options.profile_rank, world_size, command, flags.String("plan"), options.profile_rank);
    }
    return false;
  }
  if (!profile && world_size != plan.parallel.world_size()) {
    if (root) {
      err << fmt::format(
          "ptdp: error: this plan needs {} ranks (tp {}{} x pp {} x dp {}), but {} started: run "
          "`mpirun -np {} ptdp {} --plan {}`, or `ptdp {} --plan {} --launch`\n",
          plan.parallel.world_size(), plan.parallel.tp,
          plan.parallel.cp > 1 ? fmt::format(" x cp {}", plan.parallel.cp) : "", plan.parallel.pp,
          plan.parallel.dp, world_size, plan.parallel.world_size(), command, flags.String("plan"),
          command, flags.String("plan"));
    }
    return false;
  }
  return true;
}

// --profile-rank's first line: the rank, its place in the plan, and what its exchanges are.
void PrintProfiledRankStart(const Plan& plan, const ExecuteOptions& options, const RankCoords& c,
                            std::ostream& log) {
  const ParallelConfig& p = plan.parallel;
  log << fmt::format(
      "ptdp execute: rank {} of {} alone ({}: tp {} of {}{}, stage {} of {}, dp {} of {}; "
      "{} layers, hidden {}, sequence {}): its computation as the plan runs it, every "
      "exchange a local copy of the right size (timed apart); the loss is the rank's own "
      "on the last stage, 0 on the others\n",
      options.profile_rank, p.world_size(), plan.model.name, c.tp, p.tp,
      p.cp > 1 ? fmt::format(", cp {} of {}", c.cp, p.cp) : "", c.pp, p.pp, c.dp, p.dp,
      plan.model.num_layers, plan.model.hidden_size, plan.model.seq_length);
}

// A job's first lines: the model and layout, then what the executor runs differently from the
// plan (precision, attention, FSDP, the MoE dispatcher, uneven stages).
void PrintJobStart(const Plan& plan, const ExecuteOptions& opts, const Flags& flags, int world_size,
                   const std::string& host, std::ostream& log) {
  const ParallelConfig& p = plan.parallel;
  log << fmt::format(
      "ptdp execute: {} ({} layers, hidden {}, {} heads, sequence {}) on {} rank{} of {}: "
      "tp {}{} x pp {} x dp {}{}, micro-batch {}, {} micro-batches, {}{}{}{}{}\n",
      plan.model.name, plan.model.num_layers, plan.model.hidden_size,
      plan.model.num_attention_heads, plan.model.seq_length, world_size, world_size == 1 ? "" : "s",
      host, p.tp, p.cp > 1 ? fmt::format(" x cp {} ({})", p.cp, Name(p.cp_comm)) : "", p.pp, p.dp,
      plan.model.moe()
          ? fmt::format(" (experts: etp {} x ep {} x edp {})", p.expert_tp(), p.ep, p.expert_dp())
          : "",
      p.micro_batch_size, NumMicrobatches(plan.training, p), Name(p.schedule),
      p.virtual_stages > 1 ? fmt::format(" v={}", p.virtual_stages) : "",
      p.sequence_parallel ? ", sequence parallel" : "",
      p.recompute != Recompute::kNone ? fmt::format(", {} recompute", Name(p.recompute)) : "",
      p.distributed_optimizer ? ", distributed optimizer" : "");
  if (Is16Bit(opts.dtype)) {
    log << fmt::format(
        "precision: {} mixed (fp32 main weights, gradients, optimizer state and cross "
        "entropy{})\n",
        Name(opts.dtype), opts.dtype == DType::kF16 ? "; dynamic loss scaling" : "");
  }
  if (Name(opts.dtype) != Name(plan.training.precision)) {
    const bool mixed_plan =
        plan.training.precision == Precision::kBf16 || plan.training.precision == Precision::kFp16;
    log << fmt::format("note: the executor computes in {}{}, not the plan's {}{}\n",
                       Name(opts.dtype), flags.Has("dtype") ? " (--dtype)" : "",
                       Name(plan.training.precision),
                       mixed_plan && !flags.Has("dtype")
                           ? fmt::format(" (--dtype {} runs it)", Name(plan.training.precision))
                           : "");
  }
  log << fmt::format("attention: {}\n",
                     plan.options.attention == AttentionBackend::kUnfused
                         ? "unfused (the softmax kept for the backward)"
                         : "flash-style (the log-sum-exp kept, the softmax recomputed in the "
                           "backward)");
  if (p.fsdp != Fsdp::kNone) {
    log << fmt::format(
        "note: the CPU path shards only the optimizer state (the distributed optimizer), "
        "not Megatron-FSDP's {}; the arithmetic is the same\n",
        Name(p.fsdp));
  }
  if (plan.model.moe() && plan.options.moe_token_dispatcher != MoeDispatcher::kAllToAll) {
    log << fmt::format(
        "note: the CPU path dispatches MoE tokens by all-to-all over the expert-parallel "
        "group, not the plan's {} dispatcher; the arithmetic is the same\n",
        Name(plan.options.moe_token_dispatcher));
  }
  if (UnevenSplit(p)) log << "note: layers per pipeline stage: " << LayoutLine(plan) << "\n";
}

// World rank 0's files: --results (default `default_results`; none when empty) and --trace.
// Returns the results file's path.
std::string WriteRunFiles(const Plan& plan, const ExecuteOptions& opts, const Flags& flags,
                          const std::string& default_results, const ExecuteResult& result) {
  const std::string results_path = flags.OptionalString("results").value_or(default_results);
  std::vector<OutputFile> files;
  if (!results_path.empty()) {
    files.push_back({results_path, ResultsJson(plan, opts, result), "--results"});
  }
  if (const auto trace = flags.OptionalString("trace")) {
    files.push_back({*trace,
                     ChromeTraceJson("ptdp execute (measured)", result.tracks, result.events),
                     "--trace"});
  }
  WriteOutputFiles(files);
  return results_path;
}

// The run's last lines: losses, bubble and peak memory; fp16's skipped steps; the GPU's memory.
void PrintRunSummary(const ExecuteOptions& opts, const ExecuteResult& result, Backend& backend,
                     std::ostream& log) {
  if (!result.steps.empty()) {
    log << fmt::format(
        "done: steps {}..{}, loss {:.4f} -> {:.4f}; measured bubble fraction {:.3f} over {} "
        "step(s); peak memory on rank {} {:.1f} MB\n",
        result.first_step, result.steps.back().step, result.steps.front().loss,
        result.steps.back().loss, result.bubble_fraction, result.measured_steps,
        result.ranks.empty() ? 0 : result.ranks[0].world_rank,
        result.ranks.empty() ? 0.0 : result.ranks[0].memory.peak_total_bytes / 1e6);
    if (opts.dtype == DType::kF16) {
      const auto skipped = std::count_if(result.steps.begin(), result.steps.end(),
                                         [](const StepLog& s) { return s.skipped; });
      log << fmt::format(
          "fp16 loss scaling: {} of {} step(s) skipped for an inf/NaN gradient; loss scale "
          "{:g} at the last step\n",
          skipped, result.steps.size(), result.steps.back().loss_scale);
    }
  }
  if (const CudaMemoryFigures cuda = CudaMemory(backend); cuda.peak_reserved_bytes > 0) {
    log << fmt::format(
        "GPU memory: peak allocated {:.1f} MB, peak reserved by the caching allocator {:.1f} "
        "MB\n",
        result.ranks.empty() ? 0.0 : result.ranks[0].memory.peak_total_bytes / 1e6,
        cuda.peak_reserved_bytes / 1e6);
  }
}

}  // namespace

int RunAsRank(std::string_view command, const Plan& plan, const ExecuteOptions& options,
              const Flags& flags, const std::string& default_results, std::ostream& log,
              std::ostream& err,
              const std::function<int(const ExecuteResult&, const JobInfo&)>& on_root) {
  // mpirun and srun start MPI ranks; a torchrun-style launch (executor/launch/env.h) has no MPI:
  // its ranks bootstrap NCCL over the TCP store at MASTER_ADDR:MASTER_PORT.
  const LaunchEnv env = ReadLaunchEnv(ProcessEnv());
  const bool torchrun = env.launcher == Launcher::kTorchrun;
  if (torchrun && !IsCudaRequest(flags)) {
    throw InputError({"", 0, "RANK"},
                     "a torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) "
                     "bootstraps NCCL: it needs --backend cuda",
                     "CPU ranks talk over MPI: start them with mpirun or srun (ptdp " +
                         std::string(command) + " --launch)");
  }
  MpiSession session(nullptr, nullptr);
  const int world_rank = torchrun ? env.rank : session.world_rank();
  const int world_size = torchrun ? env.size : session.world_size();
  const bool root = world_rank == 0;
  const bool profile = options.profile_rank >= 0;
  if (!StartedRanksFit(command, plan, options, flags, world_size, root, err)) {
    return kExitBadInput;
  }
  std::unique_ptr<TcpStore> store;  // rank 0 serves the others until the job ends
  // Report a failure and end the whole job, before anything that talks to MPI is torn down.
  auto abort_job = [&](const std::exception& e) {
    err << fmt::format("ptdp: error: rank {} of {} (host {}): {}\n", world_rank, world_size,
                       session.host(), e.what());
    err.flush();
    MpiAbortJob(dynamic_cast<const InputError*>(&e) != nullptr ? kExitBadInput : kExitFailed);
  };
  try {
    ExecuteOptions opts = options;
    InstallFaultHooks(world_rank, &opts);
    // Only a job of several ranks can wait on a peer.
    Watchdog watchdog(
        world_size > 1 ? ReadWatchdogSeconds(flags) : 0,
        fmt::format("rank {} of {} (host {})", world_rank, world_size, session.host()));
    watchdog.Install(opts);
    const std::unique_ptr<Backend> backend = MakeBackend(flags, env);
    StandInTallies tallies;
    // --profile-rank: each group's tallies at the end of every step (the measured steps' share).
    std::vector<StandInTallies> tallies_at_end;
    if (profile) {
      opts.on_step_end = [&tallies, &tallies_at_end](int64_t) {
        tallies_at_end.push_back(tallies);
      };
    }
    ProcessGroups groups =
        profile
            ? MakeStandInGroups(options.profile_rank, plan.parallel, *backend, &tallies)
            : MakeProcessGroups(MakeWorld(session, env, *backend, flags, &store), plan.parallel);
    JobInfo job;
    job.world_size = world_size;
    job.hosts = profile ? std::vector<std::string>{session.host()}
                        : groups.world->GatherStrings(session.host(), 0);
    if (root && profile) PrintProfiledRankStart(plan, options, groups.coords, log);
    if (root && !profile) PrintJobStart(plan, opts, flags, world_size, session.host(), log);
    ExecuteResult result;
    try {
      result = Execute(plan, opts, groups, *backend, root ? &log : nullptr);
    } catch (const std::exception& e) {
      abort_job(e);
    }
    if (!root) return kExitOk;
    const std::string results_path = WriteRunFiles(plan, opts, flags, default_results, result);
    PrintRunSummary(opts, result, *backend, log);
    if (profile) {
      job.stand_in = PerMeasuredStep(tallies_at_end);
      if (!on_root) PrintProfiledRank(plan, opts, result, job, log);
    }
    if (!results_path.empty()) log << "results: " << results_path << "\n";
    if (const auto trace = flags.OptionalString("trace")) log << "trace: " << *trace << "\n";
    log.flush();
    return on_root ? on_root(result, job) : kExitOk;
  } catch (const std::exception& e) {
    abort_job(e);
  }
  return kExitFailed;  // not reached: abort_job ends the process
}

const Command kExecuteCommand{
    .name = "execute",
    .summary = "train a GPT with a plan's exact layout, one process per rank",
    .usage =
        "mpirun -np N ptdp execute --plan plan.yaml [--steps S] [--backend cpu|cuda]\n"
        "                     [--dtype fp32|bf16|fp16|fp64]\n"
        "                     [--data FILE|synthetic]\n"
        "                     [--save DIR [--save-interval K] [--save-overwrite]]\n"
        "                     [--load DIR] [--trace out.json] [--results out.json]\n"
        "       ptdp execute --plan plan.yaml --launch [--launcher mpirun|srun|torchrun] [flags]\n"
        "                    [-- launcher flags]",
    .description =
        "Trains the plan's GPT (Megatron-LM's layers: vocab-parallel embedding, column- and\n"
        "row-parallel linears, vocab-parallel cross entropy) with the plan's tensor, pipeline\n"
        "and data parallel layout, context parallelism (ring, all-gather or all-to-all\n"
        "attention), its schedule, sequence parallelism, recompute and optimizer sharding,\n"
        "on byte tokens (vocabulary 256) of a text file. N must be tp x cp x pp x dp; ranks\n"
        "are laid out tp-cp-dp-pp (Megatron's order). One line per step; at the end a\n"
        "results JSON (losses, step times, bubble, peak memory per rank) and, with --trace,\n"
        "a measured Chrome trace. CPU path: OpenBLAS + MPI, in fp32, or with --dtype bf16 or\n"
        "fp16 in Megatron's mixed precision (16-bit weights and activations, fp32 main\n"
        "weights, main_grad and Adam state, fp32 cross entropy; fp16 with dynamic loss\n"
        "scaling from 2^16, its skipped steps and scale on each step line). --backend cuda: one\n"
        "process per GPU (cuBLASLt and the executor's CUDA kernels), the GPU of a rank its\n"
        "local rank; several GPUs talk over NCCL, bootstrapped over MPI (mpirun, srun) or,\n"
        "for torchrun-style launches (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT\n"
        "set, as torchrun, Kubernetes' PyTorchJob or a Slurm script set them), over a TCP\n"
        "store on MASTER_ADDR:MASTER_PORT (--comm mpi: MPI over host copies instead, several\n"
        "processes may then share a GPU). --launch starts the ranks: srun inside a Slurm\n"
        "allocation, mpirun elsewhere, or --launcher torchrun for the GPUs of this node.\n"
        "--profile-rank R runs rank R of a plan of any size alone (no launcher; --backend cuda\n"
        "on one GPU), its exchanges local copies of their size timed apart, and prints one\n"
        "micro-batch's forward and backward against the cost model. The plan's options\n"
        "overlap_grad_reduce, overlap_param_gather and ddp_bucket_size (Megatron's\n"
        "--overlap-grad-reduce, --overlap-param-gather, --ddp-bucket-size; `ptdp plan` turns\n"
        "them on) run as Megatron runs them: each bucket's gradients reduced as the last\n"
        "backward completes its layers, beside the rest of it (NCCL: on a stream of their\n"
        "own), and each bucket's updated weights gathered behind the next forward. With\n"
        "async_tensor_parallel_allreduce (Megatron's default) the input gradients of QKV and\n"
        "fc1 are reduced over TP beside those linears' weight-gradient GEMMs.\n"
        "Checkpoints (--save DIR) carry the run's id, made when it starts; --load continues\n"
        "the checkpoint's run and id. A --save folder holding another run's checkpoints is\n"
        "refused before training (exit 2) unless the run resumes from it or --save-overwrite\n"
        "is given; a save takes DIR/.ptdp-save.lock, so a second job saving there at the same\n"
        "time fails naming the holder; a load refuses a step folder whose rank files are of\n"
        "another run than its manifest.",
    .examples =
        "mpirun -np 8 ptdp execute --plan plan.yaml --steps 20\n"
        "ptdp execute --plan plan.yaml --launch --steps 20 --trace measured.json\n"
        "ptdp execute --plan plan.yaml --launch -- --hostfile hosts\n"
        "ptdp execute --plan plan.yaml --backend cuda --launch --launcher srun -- --mpi=pmix\n"
        "ptdp execute --plan plan.yaml --backend cuda --launch --launcher torchrun\n"
        "ptdp execute --plan gpt175b.yaml --profile-rank 0 --backend cuda --dtype bf16",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddExecuteOptions,
    .run = RunExecute,
};

}  // namespace ptdp::cli
