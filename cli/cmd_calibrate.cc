// `ptdp calibrate --backend cpu`: measures this machine (executor/calibrate/calibrate.h) and writes
// a hardware profile. Compute and memory are measured in this process, one core, nothing else of
// ours running; communication by an MPI job of --ranks ranks that this command starts (the same
// launcher flags as `execute --launch`, under `timeout`), whose rank 0 hands its figures back in a
// temporary file.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "cli/cli.h"
#include "cli/cmd_execute.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/presets.h"
#include "core/yaml_io.h"
#include "executor/backend/cpu.h"
#include "executor/backend/device.h"
#include "executor/calibrate/calibrate.h"
#include "executor/calibrate/cuda.h"
#include "executor/comm/mpi.h"
#include "executor/launch/launch.h"

namespace po = boost::program_options;

namespace ptdp::cli {
namespace {

// The MPI job may take this long (start-up included) before it is killed.
constexpr int kCommLimitS = 120;

void AddCalibrateOptions(po::options_description& o) {
  o.add_options()("backend", po::value<std::string>()->value_name("B"),
                  "cpu (default) | cuda (one GPU: cuBLASLt GEMMs, copy bandwidth, launch cost, "
                  "the executor's attention)")("device", po::value<std::string>()->value_name("N"),
                                               "cuda: the CUDA device to measure (default 0)")(
      "base", po::value<std::string>()->value_name("PROFILE"),
      "cuda: the profile whose datasheet peaks, links and network the result keeps (default: "
      "by the device's name, hgx-h200, dgx-h100 or dgx-a100-80gb)")(
      "out", po::value<std::string>()->value_name("FILE"), "hardware profile to write")(
      "ranks", po::value<std::string>()->value_name("N"),
      "ranks per node to describe and to measure MPI between (default: the online cores)")(
      "name", po::value<std::string>()->value_name("NAME"),
      "the profile's name (default: the --out file's stem)")(
      "quick", po::bool_switch(),
      "a smaller, noisier measurement (about a second of timing), for tests")(
      "comm-results", po::value<std::string>()->value_name("FILE"),
      "internal: run as a rank of the MPI job calibrate starts, measure MPI only, and write "
      "the figures to FILE");
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// One rank of the MPI job: measure, rank 0 writes the figures.
int RunCommWorker(const std::string& path, const CalibrateOptions& options, std::ostream& err) {
  MpiSession session(nullptr, nullptr);
  try {
    if (session.world_size() < 2) {
      throw InputError({"", 0, "--comm-results"}, "needs at least 2 ranks (run under mpirun)");
    }
    const auto backend = MakeCpuBackend(1);
    const auto world = session.World(*backend);
    const CommFigures figures =
        MeasureComm(*world, *backend, options, session.world_rank() == 0 ? &err : nullptr);
    if (session.world_rank() == 0)
      WriteOutputFile(path, CommFiguresText(figures), "--comm-results");
    return kExitOk;
  } catch (const std::exception& e) {
    err << fmt::format("ptdp: error: rank {} of {} (host {}): {}\n", session.world_rank(),
                       session.world_size(), session.host(), e.what());
    err.flush();
    MpiAbortJob(dynamic_cast<const InputError*>(&e) != nullptr ? kExitBadInput : kExitFailed);
  }
}

// "0.31-0.79 over 125 shapes": the lowest and highest GEMM efficiency of a measured grid.
std::string GemmEfficiencyRange(const std::vector<GemmEfficiencyPoint>& grid) {
  const auto [low, high] = std::minmax_element(
      grid.begin(), grid.end(), [](auto& a, auto& b) { return a.efficiency < b.efficiency; });
  return fmt::format("{:.2f}-{:.2f} over {} shapes", low->efficiency, high->efficiency,
                     grid.size());
}

// The base profile of a device: the preset whose datasheet matches its name.
std::string BaseProfileFor(const std::string& device_name) {
  if (device_name.find("H200") != std::string::npos) return "hgx-h200";
  if (device_name.find("H100") != std::string::npos) return "dgx-h100";
  if (device_name.find("A100") != std::string::npos) return "dgx-a100-80gb";
  return "";
}

// `ptdp calibrate --backend cuda`: one GPU, in this process.
int RunCalibrateCuda(const Flags& flags, std::ostream& out, std::ostream& err) {
  for (const char* other : {"ranks", "comm-results"}) {
    if (flags.Has(other)) flags.Fail(other, "is for --backend cpu (one GPU is measured)");
  }
  const bool quick = flags.Switch("quick");
  CudaCalibrateOptions options = quick ? CudaCalibrateOptions::Quick() : CudaCalibrateOptions{};
  if (const auto device = flags.OptionalString("device")) {
    const bool digits = !device->empty() && device->size() <= 4 &&
                        device->find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoi(*device) > 1023) {
      flags.Fail("device", fmt::format("expected a GPU index, 0 to 1023, got \"{}\"", *device));
    }
    options.device = std::stoi(*device);
  }
  const std::string out_path = flags.String("out");
  const auto base_arg = flags.OptionalString("base");
  const ClusterSpec named_base = base_arg ? ResolveCluster(*base_arg, "--base") : ClusterSpec{};
  const CudaStatus status = QueryCuda();
  if (!status.usable) {
    err << "ptdp: error: `ptdp calibrate --backend cuda` needs a GPU: " << status.reason
        << "; nothing written\n";
    return kExitFailed;
  }
  CudaCalibrationRecord record;
  record.name =
      flags.OptionalString("name").value_or(std::filesystem::path(out_path).stem().string());
  if (record.name.empty()) flags.Fail("name", "must not be empty");
  record.command = "ptdp calibrate --backend cuda --out " + out_path;
  if (flags.Has("device")) record.command += fmt::format(" --device {}", options.device);
  if (base_arg) record.command += " --base " + *base_arg;
  if (flags.Has("name")) record.command += " --name " + record.name;
  if (quick) record.command += " --quick";
  record.date = UtcNow();
  record.host = ReadMachineInfo().host;
  const auto start = std::chrono::steady_clock::now();
  const CudaComputeFigures figures = MeasureCudaCompute(options, &err);
  record.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string base_name = base_arg ? *base_arg : BaseProfileFor(figures.device_name);
  if (base_name.empty()) {
    throw InputError(
        {"", 0, "--base"},
        fmt::format("no built-in profile matches the device \"{}\"", figures.device_name),
        "name the profile with its datasheet figures: --base FILE|PRESET");
  }
  const ClusterSpec base = base_arg ? named_base : ClusterPreset(base_name);
  record.base = "the " + base_name + " profile (datasheet figures, links and network)";
  const ClusterSpec cluster = CalibratedCudaCluster(base, figures, record);
  WriteOutputFile(out_path, CalibratedCudaProfileYaml(cluster, figures, record), "--out");
  out << fmt::format(
      "wrote {} ({:.1f} s of measuring on {}): bf16 {:.0f} TFLOP/s at {}^3 ({:.2f} of the "
      "datasheet's {:.0f}), GEMM efficiency {}, copy {:.0f} GB/s, "
      "{:.2f} us per kernel launch\n",
      out_path, record.elapsed_s, figures.device_name, figures.bf16_flops_per_s / 1e12,
      options.peak_size, figures.bf16_flops_per_s / base.gpu.peak_bf16_flops,
      base.gpu.peak_bf16_flops / 1e12, GemmEfficiencyRange(cluster.gpu.gemm_efficiency),
      figures.copy_bytes_per_s / 1e9, figures.launch_s * 1e6);
  return kExitOk;
}

// A CPU calibration's record: the profile's name, the command that repeats it, when and where.
CalibrationRecord CpuCalibrationRecord(const Flags& flags, const std::string& out_path,
                                       const MachineInfo& machine, int ranks, bool quick) {
  CalibrationRecord record;
  record.name =
      flags.OptionalString("name").value_or(std::filesystem::path(out_path).stem().string());
  if (record.name.empty()) flags.Fail("name", "must not be empty");
  record.command = "ptdp calibrate --backend cpu --out " + out_path;
  if (flags.Has("ranks")) record.command += fmt::format(" --ranks {}", ranks);
  if (flags.Has("name")) record.command += " --name " + record.name;
  if (quick) record.command += " --quick";
  for (const std::string& a : flags.passthrough()) record.command += " " + a;
  record.date = UtcNow();
  record.machine = machine;
  record.ranks_per_node = ranks;
  record.base = "the cpu-local preset (hwprofiles/cpu-local.yaml: guesses)";
  return record;
}

// Compute and memory, in this process; the GEMM grid's progress on one line.
CpuComputeFigures MeasureComputeShowingProgress(Backend& backend, const CalibrateOptions& options,
                                                std::ostream& err) {
  // The GEMM grid is the long part (each m of the grid ends with a line of its own).
  ProgressLine progress(err, "ptdp calibrate");
  const size_t per_m = options.gemm_axis.size() * options.gemm_axis.size();
  return MeasureCpuCompute(backend, options, &err, [&](size_t done, size_t total) {
    progress.Update(fmt::format("GEMM grid: {} of {} shapes timed", done, total));
    if (done % per_m == 0) progress.Clear();
  });
}

// MPI between `ranks` ranks of this machine, by a job this command starts (under `timeout`), whose
// rank 0 hands its figures back in a temporary file.
CommFigures MeasureCommJob(const Flags& flags, int ranks, bool quick, std::ostream& err) {
  const std::string results =
      (std::filesystem::temp_directory_path() / fmt::format("ptdp-calibrate-{}.txt", getpid()))
          .string();
  std::vector<std::string> extra = {"--comm-results", results};
  if (quick) extra.push_back("--quick");
  constexpr const char* kForwarded[] = {"backend"};
  LaunchCommand command = LaunchSelf("calibrate", ranks, flags, kForwarded, extra);
  command.argv.insert(command.argv.begin(), {"timeout", std::to_string(kCommLimitS)});
  std::string line;
  for (const std::string& a : command.argv) line += (line.empty() ? "" : " ") + a;
  err << "calibrate: MPI between " << ranks << " ranks: " << line << "\n";
  err.flush();
  const int rc = RunLaunchCommand(command);
  if (rc != 0) {
    std::filesystem::remove(results);
    throw std::runtime_error(
        fmt::format("the MPI measurement failed (exit code {}{}); nothing written", rc,
                    rc == 124 ? fmt::format(": killed after {} s", kCommLimitS) : ""));
  }
  const std::string text = ReadTextFile(results);
  std::filesystem::remove(results);
  const CommFigures comm = ParseCommFigures(text, results);
  if (comm.hosts != 1) {
    throw InputError({"", 0, "--"},
                     fmt::format("the MPI job ran on {} hosts; calibrate describes one machine "
                                 "(its node figures are between the ranks of one host)",
                                 comm.hosts),
                     "leave out mpirun's host flags");
  }
  return comm;
}

// The line saying what was written: per rank compute and memory, and MPI's figures when measured.
void PrintCpuProfileLine(const std::string& out_path, const CalibrationRecord& record,
                         const ClusterSpec& cluster, bool comm_measured, std::ostream& out) {
  out << fmt::format(
      "wrote {} ({:.1f} s of measuring): per rank (one core) {:.1f} GFLOP/s fp32 sgemm peak, "
      "GEMM efficiency {}, memory {:.1f} GB/s (x {:.2f} for y += x)",
      out_path, record.elapsed_s, cluster.gpu.peak_fp32_flops / 1e9,
      GemmEfficiencyRange(cluster.gpu.gemm_efficiency), cluster.gpu.hbm_bandwidth_bytes_per_s / 1e9,
      cluster.gpu.memory_efficiency);
  if (comm_measured) {
    out << fmt::format(
        "; {} ranks per node: all-reduce busbw {:.2f} GB/s, point to point {:.2f} GB/s, step "
        "latency {:.2f} us, base latency {:.2f} us",
        cluster.gpus_per_node, cluster.nvlink_busbw_bytes_per_s / 1e9,
        cluster.nvlink_bytes_per_s / 1e9, cluster.nvlink_step_latency_s * 1e6,
        cluster.collective_base_latency_s * 1e6);
  }
  out << "\n";
}

int RunCalibrate(const Flags& flags, std::ostream& out, std::ostream& err) {
  const std::string backend_name = flags.OptionalString("backend").value_or("cpu");
  if (backend_name == "cuda") return RunCalibrateCuda(flags, out, err);
  if (backend_name != "cpu") {
    flags.Fail("backend", fmt::format("expected cpu or cuda, got \"{}\"", backend_name));
  }
  for (const char* other : {"device", "base"}) {
    if (flags.Has(other)) flags.Fail(other, "is for --backend cuda");
  }
  const bool quick = flags.Switch("quick");
  const CalibrateOptions options = quick ? CalibrateOptions::Quick() : CalibrateOptions{};
  if (const auto path = flags.OptionalString("comm-results")) {
    for (const char* other : {"out", "ranks", "name"}) {
      if (flags.Has(other)) flags.Fail(other, "cannot be combined with --comm-results");
    }
    return RunCommWorker(*path, options, err);
  }

  if (LauncherRank() >= 0) {
    throw InputError({"", 0, ""}, "ptdp calibrate runs under mpirun only as its own MPI job",
                     "run `ptdp calibrate --out FILE` without mpirun: it starts the ranks itself");
  }
  const std::string out_path = flags.String("out");  // writable: checked with every output
  MachineInfo machine = ReadMachineInfo();
  const int ranks = static_cast<int>(flags.OptionalPositiveInt("ranks").value_or(machine.cores));
  if (ranks > 1024) flags.Fail("ranks", fmt::format("at most 1024, got {}", ranks));
  CalibrationRecord record = CpuCalibrationRecord(flags, out_path, machine, ranks, quick);

  const auto start = std::chrono::steady_clock::now();
  err << fmt::format("calibrate: {} ({}, {} cores); {} ranks per node{}\n", machine.host,
                     machine.cpu_model, machine.cores, ranks, quick ? "; quick" : "");
  if (machine.load_average > 0.5) {
    err << fmt::format(
        "calibrate: warning: load average {:.2f}: other work is running, the figures will be "
        "low (the profile records it)\n",
        machine.load_average);
  }
  const auto backend = MakeCpuBackend(1);
  const CpuComputeFigures compute = MeasureComputeShowingProgress(*backend, options, err);

  std::optional<CommFigures> comm;
  if (ranks >= 2) {
    comm = MeasureCommJob(flags, ranks, quick, err);
  } else {
    err << "calibrate: one rank: MPI not measured (the profile keeps the placeholder's node "
           "figures)\n";
  }
  record.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const ClusterSpec cluster = CalibratedCluster(ClusterPreset("cpu-local"), compute, comm, record);
  WriteOutputFile(out_path, CalibratedProfileYaml(cluster, compute, comm, record), "--out");
  PrintCpuProfileLine(out_path, record, cluster, comm.has_value(), out);
  return kExitOk;
}

}  // namespace

const Command kCalibrateCommand{
    .name = "calibrate",
    .summary = "measure this machine and write a hardware profile",
    .usage =
        "ptdp calibrate --backend cpu --out profile.yaml [--ranks N] [--name NAME]\n"
        "                     [--quick] [-- mpirun flags]\n"
        "       ptdp calibrate --backend cuda --out profile.yaml [--device N] [--base PROFILE]\n"
        "                     [--name NAME] [--quick]",
    .description =
        "Measures this machine as the CPU executor uses it (a GPU = one rank = one core running\n"
        "one OpenBLAS thread) and writes a hardware profile (the format of hwprofiles/) with a\n"
        "comment on every key saying how it was obtained: the sgemm peak and a GEMM-efficiency\n"
        "grid through the executor's own kernels, memory bandwidth, and, from an MPI job of\n"
        "--ranks ranks that it starts, all-reduce bus bandwidth (nccl-tests' busbw), point-to-\n"
        "point bandwidth and latencies. Inter-node figures cannot be measured on one machine\n"
        "and are kept from the cpu-local placeholder, as the file says. Takes about 15 s;\n"
        "progress on stderr. `ptdp validate --cluster FILE` compares the executor with the\n"
        "simulator using the result.\n"
        "\n"
        "--backend cuda measures one GPU as the executor's CUDA backend uses it: cuBLASLt\n"
        "products over a GEMM grid in bf16, fp16 and fp32 (and FP8 on GPUs with FP8 units:\n"
        "E4M3 operands, bf16 result), the device-to-device copy rate, the\n"
        "host's cost per kernel launch, and the executor's own attention kernel by sequence\n"
        "length (CUDA events, random inputs, medians). Datasheet peaks, links and network come\n"
        "from --base (default: the built-in profile of the device's name). Takes about a\n"
        "minute; --quick about 10 s.",
    .examples =
        "ptdp calibrate --backend cpu --out cpu-calibrated.yaml\n"
        "ptdp calibrate --backend cpu --out cpu4.yaml --ranks 4\n"
        "ptdp calibrate --backend cuda --out h200-measured.yaml",
    .implemented = true,
    .tracked_in = "",
    .add_options = AddCalibrateOptions,
    .run = RunCalibrate,
};

}  // namespace ptdp::cli
