#include "executor/calibrate/calibrate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/spec_yaml.h"
#include "core/units.h"
#include "executor/calibrate/cuda.h"

// OpenBLAS's own query functions (its cblas.h declares them too; declared here so that this file
// needs no BLAS header).
extern "C" char* openblas_get_config(void);
extern "C" int openblas_get_num_threads(void);

namespace ptdp {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  PTDP_CHECK(!v.empty());
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Seconds per call of `kernel`: each timing repeats it until min_s has passed (at least once),
// the median of `repeats` timings is kept. One untimed call first (page faults, caches).
double TimePerCall(const std::function<void()>& kernel, int repeats, double min_s) {
  kernel();
  std::vector<double> per_call;
  for (int r = 0; r < repeats; ++r) {
    int64_t calls = 0;
    const double start = Now();
    double elapsed = 0;
    do {
      kernel();
      ++calls;
      elapsed = Now() - start;
    } while (elapsed < min_s);
    per_call.push_back(elapsed / static_cast<double>(calls));
  }
  return Median(per_call);
}

// Values spread over [-3, 3] (the range of activations; erf and exp take their general paths).
void FillSpread(Backend& backend, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < host.size(); ++i) {
    host[i] = static_cast<float>(static_cast<double>((i * 7919) % 6007) / 1001.0 - 3.0);
  }
  backend.Upload(t.span(), host.data());
}

// Rounded to `digits` significant digits.
double RoundSignificant(double value, int digits) {
  if (value == 0 || !std::isfinite(value)) return value;
  const double scale =
      std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(std::fabs(value)))));
  return std::round(value * scale) / scale;
}
double Round3(double value_si, double unit) { return RoundSignificant(value_si / unit, 3) * unit; }

}  // namespace

CalibrateOptions CalibrateOptions::Quick() {
  CalibrateOptions o;
  o.gemm_axis = {32, 256};
  o.peak_size = 512;
  o.repeats = 3;
  o.min_timing_s = 5e-4;
  o.stream_bytes = int64_t{16} << 20;
  o.kernel_bytes = int64_t{256} << 10;
  o.allreduce_bytes = {int64_t{1} << 20};
  return o;
}

namespace {

void Say(std::ostream* progress, const std::string& line) {
  if (progress != nullptr) *progress << "calibrate: " << line << "\n" << std::flush;
}

// The sgemm peak on square products of o.peak_size, then the efficiency grid, timed as the
// executor's three kinds of linear-layer products; a, b and c hold the largest shape of either.
void MeasureGemm(Backend& backend, const CalibrateOptions& o, const Tensor& a, const Tensor& b,
                 const Tensor& c, std::ostream* progress,
                 const std::function<void(size_t, size_t)>& on_shape, CpuComputeFigures* f) {
  const int64_t p = o.peak_size;
  const double peak_s = TimePerCall(
      [&] { backend.Gemm(false, false, p, p, p, 1, a.span(), p, b.span(), p, 0, c.span(), p); },
      o.repeats, 0);
  f->peak_fp32_flops = 2.0 * p * p * p / peak_s;
  Say(progress,
      fmt::format("sgemm peak: {}^3, median of {}: {:.1f} GFLOP/s ({} BLAS thread{})", p, o.repeats,
                  f->peak_fp32_flops / 1e9, f->blas_threads, f->blas_threads == 1 ? "" : "s"));

  const size_t points = o.gemm_axis.size() * o.gemm_axis.size() * o.gemm_axis.size();
  for (const int64_t m : o.gemm_axis) {
    for (const int64_t n : o.gemm_axis) {
      for (const int64_t k : o.gemm_axis) {
        // Forward X W^T: A (m, k), B stored (n, k). Input gradient dY W: A (m, k), B (k, n).
        // Weight gradient dY^T X: A stored (k, m), B (k, n).
        const double nt = TimePerCall(
            [&] {
              backend.Gemm(false, true, m, n, k, 1, a.span(), k, b.span(), k, 0, c.span(), n);
            },
            o.repeats, o.min_timing_s);
        const double nn = TimePerCall(
            [&] {
              backend.Gemm(false, false, m, n, k, 1, a.span(), k, b.span(), n, 0, c.span(), n);
            },
            o.repeats, o.min_timing_s);
        const double tn = TimePerCall(
            [&] {
              backend.Gemm(true, false, m, n, k, 1, a.span(), m, b.span(), n, 0, c.span(), n);
            },
            o.repeats, o.min_timing_s);
        const double rate = 2.0 * m * n * k / ((nt + nn + tn) / 3);
        double efficiency = rate / f->peak_fp32_flops;
        if (efficiency > 1) efficiency = 1, ++f->clamped_points;
        f->gemm_efficiency.push_back({m, n, k, efficiency});
        if (on_shape) on_shape(f->gemm_efficiency.size(), points);
      }
    }
    Say(progress,
        fmt::format("GEMM grid: m = {} done ({}/{} shapes)", m, f->gemm_efficiency.size(), points));
  }
}

// Streaming bandwidth: copy and y += x on arrays beyond the caches.
void MeasureStreaming(Backend& backend, const CalibrateOptions& o, std::ostream* progress,
                      CpuComputeFigures* f) {
  const int64_t elements = o.stream_bytes / 4;
  const Tensor x(backend, DType::kF32, {elements}, MemCategory::kWorkspace);
  const Tensor y(backend, DType::kF32, {elements}, MemCategory::kWorkspace);
  FillSpread(backend, x);
  f->stream_bytes = elements * 4;
  const double bytes = static_cast<double>(f->stream_bytes);
  f->copy_bytes_per_s =
      2 * bytes / TimePerCall([&] { backend.Copy(y.span(), x.span()); }, o.repeats, 0);
  f->add_bytes_per_s =
      3 * bytes / TimePerCall([&] { backend.Add(y.span(), x.span()); }, o.repeats, 0);
  Say(progress,
      fmt::format("streaming, 2 x {} MiB: copy {:.1f} GB/s, y += x {:.1f} GB/s (reads + writes)",
                  f->stream_bytes >> 20, f->copy_bytes_per_s / 1e9, f->add_bytes_per_s / 1e9));
}

// The executor's element-wise kernels on activation-sized tensors.
void MeasureKernels(Backend& backend, const CalibrateOptions& o, std::ostream* progress,
                    CpuComputeFigures* f) {
  const int64_t cols = 128, rows = std::max<int64_t>(1, o.kernel_bytes / 4 / cols);
  const int64_t elements = rows * cols;
  const Tensor x(backend, DType::kF32, {elements}, MemCategory::kWorkspace);
  const Tensor y(backend, DType::kF32, {elements}, MemCategory::kWorkspace);
  const Tensor z(backend, DType::kF32, {elements}, MemCategory::kWorkspace);
  const Tensor w(backend, DType::kF32, {cols}, MemCategory::kWorkspace);
  const Tensor bias(backend, DType::kF32, {cols}, MemCategory::kWorkspace);
  const Tensor mean(backend, DType::kF32, {rows}, MemCategory::kWorkspace);
  const Tensor rstd(backend, DType::kF32, {rows}, MemCategory::kWorkspace);
  FillSpread(backend, x);
  FillSpread(backend, y);
  backend.Fill(w.span(), 1);
  const double e = static_cast<double>(elements) * 4;
  struct Case {
    const char* name;
    double bytes;
    std::function<void()> run;
  };
  const Case cases[] = {
      {"copy", 2 * e, [&] { backend.Copy(z.span(), x.span()); }},
      {"add (y += x)", 3 * e, [&] { backend.Add(z.span(), x.span()); }},
      {"layernorm forward", 2 * e,
       [&] {
         backend.LayerNormForward(z.span(), mean.span(), rstd.span(), x.span(), w.span(),
                                  bias.span(), rows, cols, 1e-5);
       }},
      {"gelu", 2 * e, [&] { backend.Gelu(z.span(), x.span()); }},
      {"gelu backward", 3 * e, [&] { backend.GeluBackward(z.span(), x.span(), y.span()); }},
  };
  std::string line;
  for (const Case& k : cases) {
    const double rate = k.bytes / TimePerCall(k.run, o.repeats, o.min_timing_s);
    f->kernels.push_back({k.name, elements * 4, rate});
    line += fmt::format("{}{} {:.1f}", line.empty() ? "" : ", ", k.name, rate / 1e9);
  }
  Say(progress,
      fmt::format("executor kernels on {} KiB tensors (GB/s): {}", elements * 4 >> 10, line));
}

}  // namespace

CpuComputeFigures MeasureCpuCompute(Backend& backend, const CalibrateOptions& o,
                                    std::ostream* progress,
                                    const std::function<void(size_t, size_t)>& on_shape) {
  PTDP_CHECK(!o.gemm_axis.empty() && o.repeats > 0 && o.peak_size > 0);
  PTDP_CHECK(std::is_sorted(o.gemm_axis.begin(), o.gemm_axis.end()));
  CpuComputeFigures f;
  f.blas_threads = openblas_get_num_threads();
  f.peak_size = o.peak_size;
  // Matrix products: three operands big enough for the largest shape of either kind (held to the
  // end, as the other measurements run).
  const int64_t largest = std::max(o.peak_size, o.gemm_axis.back());
  const Tensor a(backend, DType::kF32, {largest * largest}, MemCategory::kWorkspace);
  const Tensor b(backend, DType::kF32, {largest * largest}, MemCategory::kWorkspace);
  const Tensor c(backend, DType::kF32, {largest * largest}, MemCategory::kWorkspace);
  FillSpread(backend, a);
  FillSpread(backend, b);
  MeasureGemm(backend, o, a, b, c, progress, on_shape, &f);
  MeasureStreaming(backend, o, progress, &f);
  MeasureKernels(backend, o, progress, &f);
  return f;
}

int64_t ProcessRssBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "... kB"
  }
  return 0;
}

CommFigures MeasureComm(Comm& world, Backend& backend, const CalibrateOptions& o,
                        std::ostream* progress) {
  PTDP_CHECK(world.size() >= 2 && !o.allreduce_bytes.empty());
  const bool root = world.rank() == 0;
  auto say = [&](const std::string& line) {
    if (root && progress != nullptr) *progress << "calibrate: " << line << "\n" << std::flush;
  };
  CommFigures f;
  f.ranks = world.size();
  {
    const Tensor one(backend, DType::kF32, {1}, MemCategory::kCommBuffers);
    world.AllReduce(one.span(), ReduceOp::kSum);  // MPI's connections are set up lazily
    f.process_rss_bytes = static_cast<int64_t>(
        world.AllReduceHost(static_cast<double>(ProcessRssBytes()), ReduceOp::kMax));
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::vector<std::string> hosts = world.GatherStrings(host, 0);
  f.hosts = static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size());

  // A timing of `calls` back-to-back operations after a barrier, as the slowest rank saw it.
  auto time_collective = [&](const std::function<void()>& op, int calls) {
    std::vector<double> per_call;
    op();
    for (int r = 0; r < o.repeats; ++r) {
      world.Barrier();
      const double start = Now();
      for (int i = 0; i < calls; ++i) op();
      const double mine = (Now() - start) / calls;
      per_call.push_back(world.AllReduceHost(mine, ReduceOp::kMax));
    }
    return Median(per_call);
  };
  const double n = f.ranks;
  const int64_t largest = *std::max_element(o.allreduce_bytes.begin(), o.allreduce_bytes.end());
  const Tensor buffer(backend, DType::kF32, {std::max<int64_t>(largest, o.latency_bytes) / 4},
                      MemCategory::kCommBuffers);
  {
    // nccl-tests' habit: check a result before timing. Rank i contributes i + 1 everywhere.
    const Span s = buffer.span().Slice(0, o.allreduce_bytes.front() / 4);
    backend.Fill(s, world.rank() + 1);
    world.AllReduce(s, ReduceOp::kSum);
    std::vector<float> sums(static_cast<size_t>(s.numel));
    backend.Download(s, sums.data());
    const float want = static_cast<float>(n * (n + 1) / 2);
    for (const float got : sums) {
      if (got != want) {
        throw std::runtime_error(
            fmt::format("MPI_Allreduce returned {} where {} was expected", got, want));
      }
    }
    backend.Fill(buffer.span(), 0);
  }
  for (const int64_t bytes : o.allreduce_bytes) {
    const Span s = buffer.span().Slice(0, bytes / 4);
    const double t = time_collective([&] { world.AllReduce(s, ReduceOp::kSum); }, 3);
    const double busbw = static_cast<double>(s.bytes()) / t * 2 * (n - 1) / n;
    f.allreduce_busbw.emplace_back(s.bytes(), busbw);
    f.allreduce_busbw_bytes_per_s = std::max(f.allreduce_busbw_bytes_per_s, busbw);
  }
  const Span small = buffer.span().Slice(0, std::max<int64_t>(1, o.latency_bytes / 4));
  f.allreduce_small_s = time_collective([&] { world.AllReduce(small, ReduceOp::kSum); }, 200);
  {
    std::string line;
    for (const auto& [bytes, bw] : f.allreduce_busbw) {
      line += fmt::format("{}{} KiB {:.2f}", line.empty() ? "" : ", ", bytes >> 10, bw / 1e9);
    }
    say(fmt::format("all-reduce over {} ranks on {} host{}: busbw (GB/s) {}; {} B in {:.2f} us",
                    f.ranks, f.hosts, f.hosts == 1 ? "" : "s", line, small.bytes(),
                    f.allreduce_small_s * 1e6));
  }

  // Ping-pong between ranks 0 and 1; the others wait at the barriers.
  auto ping_pong = [&](Span s, int calls) {
    auto one = [&] {
      if (world.rank() == 0) {
        world.Isend(s, 1, 0)->Wait();
        world.Recv(s, 1, 1);
      } else if (world.rank() == 1) {
        world.Recv(s, 0, 0);
        world.Isend(s, 0, 1)->Wait();
      }
    };
    return time_collective(one, calls) / 2;  // one way
  };
  f.p2p_latency_s = ping_pong(small, 200);
  for (const int64_t bytes : o.allreduce_bytes) {
    const Span s = buffer.span().Slice(0, bytes / 4);
    const double rate = static_cast<double>(s.bytes()) / ping_pong(s, 3);
    if (rate > f.p2p_bytes_per_s) f.p2p_bytes_per_s = rate, f.p2p_bytes = s.bytes();
  }
  say(fmt::format(
      "point to point, ranks 0 and 1: {} B one way in {:.2f} us; best {:.2f} GB/s "
      "({} KiB messages)",
      small.bytes(), f.p2p_latency_s * 1e6, f.p2p_bytes_per_s / 1e9, f.p2p_bytes >> 10));
  return f;
}

std::string CommFiguresText(const CommFigures& f) {
  std::string out = fmt::format("ranks {}\nhosts {}\n", f.ranks, f.hosts);
  for (const auto& [bytes, bw] : f.allreduce_busbw) {
    out += fmt::format("allreduce_busbw {} {}\n", bytes, bw);
  }
  out += fmt::format(
      "allreduce_busbw_bytes_per_s {}\nallreduce_small_s {}\np2p_latency_s {}\n"
      "p2p_bytes_per_s {}\np2p_bytes {}\nprocess_rss_bytes {}\n",
      f.allreduce_busbw_bytes_per_s, f.allreduce_small_s, f.p2p_latency_s, f.p2p_bytes_per_s,
      f.p2p_bytes, f.process_rss_bytes);
  return out;
}

CommFigures ParseCommFigures(std::string_view text, const std::string& source) {
  CommFigures f;
  std::istringstream in{std::string(text)};
  std::set<std::string> seen;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string key;
    words >> key;
    auto fail = [&](const std::string& what) {
      throw InputError({source, line_number, key}, what);
    };
    auto number = [&] {
      double v = 0;
      if (!(words >> v) || !std::isfinite(v) || v < 0) fail("expected a non-negative number");
      return v;
    };
    // A whole number of at most `max` (bytes at most 2^62, counts at most 2^20), so that the
    // conversion is exact and defined.
    auto whole = [&](double max) {
      const double v = number();
      if (v > max || v != std::floor(v)) {
        fail(fmt::format("expected a whole number of at most {}", max));
      }
      return static_cast<int64_t>(v);
    };
    constexpr double kMaxBytes = 4611686018427387904.0, kMaxCount = 1048576.0;
    if (key == "allreduce_busbw") {
      const int64_t bytes = whole(kMaxBytes);
      f.allreduce_busbw.emplace_back(bytes, number());
    } else {
      if (!seen.insert(key).second) fail("appears twice");
      if (key == "ranks") {
        f.ranks = static_cast<int>(whole(kMaxCount));
      } else if (key == "hosts") {
        f.hosts = static_cast<int>(whole(kMaxCount));
      } else if (key == "allreduce_busbw_bytes_per_s") {
        f.allreduce_busbw_bytes_per_s = number();
      } else if (key == "allreduce_small_s") {
        f.allreduce_small_s = number();
      } else if (key == "p2p_latency_s") {
        f.p2p_latency_s = number();
      } else if (key == "p2p_bytes_per_s") {
        f.p2p_bytes_per_s = number();
      } else if (key == "p2p_bytes") {
        f.p2p_bytes = whole(kMaxBytes);
      } else if (key == "process_rss_bytes") {
        f.process_rss_bytes = whole(kMaxBytes);
      } else {
        fail("unknown key");
      }
    }
    std::string rest;
    if (words >> rest) fail("unexpected text after the value");
  }
  if (f.ranks < 2 || f.allreduce_busbw_bytes_per_s <= 0 || f.p2p_bytes_per_s <= 0) {
    throw InputError({source, 0, ""}, "incomplete figures (ranks, all-reduce or point to point)");
  }
  return f;
}

MachineInfo ReadMachineInfo() {
  MachineInfo m;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  m.host = host;
  m.cpu_model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      m.cpu_model = line.substr(line.find(':') + 1);
      m.cpu_model.erase(0, m.cpu_model.find_first_not_of(" \t"));
      break;
    }
  }
  m.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  std::ifstream load("/proc/loadavg");
  if (!(load >> m.load_average)) m.load_average = -1;
  const char* config = openblas_get_config();
  m.blas = config != nullptr ? config : "unknown BLAS";
  while (!m.blas.empty() && m.blas.back() == ' ') m.blas.pop_back();
  return m;
}

ClusterSpec CalibratedCluster(const ClusterSpec& base, const CpuComputeFigures& compute,
                              const std::optional<CommFigures>& comm,
                              const CalibrationRecord& record) {
  PTDP_CHECK(record.ranks_per_node > 0 && compute.peak_fp32_flops > 0);
  ClusterSpec c = base;
  c.name = record.name;
  c.description = fmt::format(
      "MEASURED by ptdp calibrate on {}, {}: a GPU = an executor rank = a core; network not "
      "measured",
      record.machine.host, record.date);
  GpuSpec& g = c.gpu;
  g.name = "cpu-core";
  const double peak = Round3(compute.peak_fp32_flops, units::kTflops);
  g.peak_fp32_flops = peak;
  g.peak_bf16_flops = peak;  // the CPU executor computes bf16 and fp16 plans in fp32
  g.peak_fp16_flops = peak;
  g.gemm_efficiency = compute.gemm_efficiency;
  for (GemmEfficiencyPoint& p : g.gemm_efficiency) p.efficiency = RoundSignificant(p.efficiency, 3);
  g.hbm_bytes = record.machine.memory_bytes / record.ranks_per_node;
  g.hbm_bandwidth_bytes_per_s = Round3(compute.copy_bytes_per_s, units::kGBPerS);
  g.memory_efficiency =
      std::min(1.0, RoundSignificant(compute.add_bytes_per_s / compute.copy_bytes_per_s, 3));
  c.gpus_per_node = record.ranks_per_node;
  if (comm) {
    g.reserved_bytes = comm->process_rss_bytes;
    c.nvlink_bytes_per_s = Round3(comm->p2p_bytes_per_s, units::kGBPerS);
    c.nvlink_busbw_bytes_per_s = Round3(comm->allreduce_busbw_bytes_per_s, units::kGBPerS);
    const double step = Round3(comm->p2p_latency_s, units::kMicrosecond);
    c.nvlink_step_latency_s = step;
    const double base_latency = comm->allreduce_small_s - 2.0 * (comm->ranks - 1) * step;
    c.collective_base_latency_s = base_latency > 0 ? Round3(base_latency, units::kMicrosecond) : 0;
  }
  PTDP_CHECK(g.reserved_bytes < g.hbm_bytes);
  // What the file will read back as (the writer and reader round-trip exactly).
  return ParseClusterYaml(WriteClusterYaml(c), "<calibrated profile>");
}

namespace {

std::string Gb(double bytes_per_s) { return fmt::format("{:.3g}", bytes_per_s / 1e9); }

// `text` as YAML comment lines of at most `width` columns, `indent` spaces in; words longer than
// a line stay whole. An empty text gives no lines.
std::string CommentLines(const std::string& text, size_t indent, size_t width = 100) {
  std::string out, line;
  const std::string lead = std::string(indent, ' ') + "#";
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (!line.empty() && lead.size() + line.size() + 1 + word.size() > width) {
      out += lead + line + "\n";
      line.clear();
    }
    line += " " + word;
  }
  if (!line.empty()) out += lead + line + "\n";
  return out;
}

// WriteClusterYaml's text of `cluster` after `header`, with the comment note[path] (by dotted
// path, e.g. "gpu.hbm_bytes") above each key, `kept` above the keys without one. Throws
// InternalError unless the text reads back as `cluster`.
std::string AnnotatedClusterYaml(const ClusterSpec& cluster, const std::string& header,
                                 const std::map<std::string, std::string>& note,
                                 const std::string& kept) {
  std::istringstream lines(WriteClusterYaml(cluster));
  std::string out = header, section;
  for (std::string line; std::getline(lines, line);) {
    const size_t indent = line.find_first_not_of(' ');
    const size_t colon = line.find(':');
    if (indent == std::string::npos || line[indent] == '-' || line[indent] == '#' ||
        colon == std::string::npos) {
      out += line + "\n";
      continue;
    }
    const std::string key = line.substr(indent, colon - indent);
    const bool opens_section = colon + 1 == line.size();
    if (indent == 0 && opens_section) section = key;
    const std::string path = indent == 0 ? key : section + "." + key;
    const bool table = path == "gpu.gemm_efficiency" || path == "gpu.gemm_efficiency_fp8" ||
                       path == "gpu.flash_attention";
    if (!table && (opens_section || path == "description")) {
      out += line + "\n";
      continue;
    }
    const auto it = note.find(path);
    out += CommentLines(it == note.end() ? kept : it->second, indent) + line + "\n";
  }
  const ClusterSpec back = ParseClusterYaml(out, "<calibrated profile>");
  if (!(back == cluster)) throw InternalError("calibrate: the profile text does not read back");
  return out;
}

// The CPU profile's opening comment: where, when and how it was measured, and what a "GPU" is.
std::string CpuProfileHeader(const CalibrationRecord& r, bool comm_measured) {
  const MachineInfo& m = r.machine;
  std::string header = CommentLines(
      fmt::format("{}: a hardware profile MEASURED on {} ({}, {} cores, {:.1f} GB of memory) "
                  "on {} in {:.1f} s by `{}` (OpenBLAS: {}).",
                  r.name, m.host, m.cpu_model, m.cores, static_cast<double>(m.memory_bytes) / 1e9,
                  r.date, r.elapsed_s, r.command, m.blas),
      0);
  header += CommentLines(
      "A \"GPU\" here is one rank of the CPU executor: one core running one OpenBLAS thread "
      "(`ptdp execute` runs one rank per core). Compute and memory were timed in one process "
      "(no other rank of ours running), communication between the ranks of an MPI job on this "
      "machine "
      "(mpirun --oversubscribe --bind-to none, one thread per rank). Every figure is the median "
      "of repeated timings; the cores are shared with other work, so expect some noise between "
      "runs. The CPU executor computes in fp32 whatever the plan's precision, so the bf16 and "
      "fp16 peaks are its fp32 rate. Inter-node figures (network:) are NOT measured: there is "
      "one machine; they keep the placeholder's guesses. Host overheads (an optional host: "
      "section) are left out, i.e. 0: the executor calls its kernels directly, nothing is "
      "launched.",
      0);
  if (m.load_average >= 0) {
    header += CommentLines(
        fmt::format("Load average when the measurement started: {:.2f} (1 minute; {} cores).",
                    m.load_average, m.cores),
        0);
  }
  if (!comm_measured) {
    header += CommentLines(
        "Communication is NOT measured (one rank): node bandwidths, latencies "
        "and reserved_bytes are kept from " +
            r.base + ".",
        0);
  }
  return header;
}

// A comment above each key of the CPU profile, by dotted path: how it was obtained.
std::map<std::string, std::string> CpuProfileNotes(const CpuComputeFigures& compute,
                                                   const std::optional<CommFigures>& comm,
                                                   const CalibrationRecord& r,
                                                   const std::string& kept) {
  const MachineInfo& m = r.machine;
  std::string kernels;
  for (const KernelRate& k : compute.kernels) {
    kernels += fmt::format("{}{} {}", kernels.empty() ? "" : ", ", k.name, Gb(k.bytes_per_s));
  }
  std::string allreduce;
  if (comm) {
    for (const auto& [bytes, bw] : comm->allreduce_busbw) {
      allreduce += fmt::format("{}{} KiB {}", allreduce.empty() ? "" : ", ", bytes >> 10, Gb(bw));
    }
  }
  std::set<int64_t> axis_values;
  for (const GemmEfficiencyPoint& p : compute.gemm_efficiency) axis_values.insert(p.k);
  std::string axis;
  for (const int64_t v : axis_values) axis += fmt::format("{}{}", axis.empty() ? "" : ", ", v);

  return {
      {"name", "ptdp calibrate --name (default: the --out file's stem)."},
      {"gpu.name", "One CPU core as an executor rank."},
      {"gpu.peak_bf16_tflops",
       "MEASURED: the fp32 peak below (the CPU executor computes bf16 plans in fp32)."},
      {"gpu.peak_fp16_tflops",
       "MEASURED: the fp32 peak below (the CPU executor computes fp16 plans in fp32)."},
      {"gpu.peak_fp32_tflops",
       fmt::format("MEASURED: cblas_sgemm of {0} x {0} x {0} (NN, one thread) through the "
                   "executor's Backend::Gemm, median of the repeats.",
                   compute.peak_size)},
      {"gpu.hbm_bytes", fmt::format("This machine's physical memory ({} bytes) / {} ranks per "
                                    "node.",
                                    m.memory_bytes, r.ranks_per_node)},
      {"gpu.hbm_bandwidth_gb_per_s",
       fmt::format("MEASURED: one core copying {} MiB arrays (the executor's Backend::Copy, "
                   "memmove; reads + writes): main memory, the CPU rank's \"HBM\". On tensors "
                   "that fit the core's caches, as the small models' activations do, streaming "
                   "is faster: see the kernel rates above gemm_efficiency.",
                   compute.stream_bytes >> 20)},
      {"gpu.memory_efficiency",
       fmt::format("MEASURED: the executor's y += x on the same arrays ({} GB/s, two reads and a "
                   "write) over the copy rate, at most 1.",
                   Gb(compute.add_bytes_per_s))},
      {"gpu.reserved_bytes",
       comm ? fmt::format("MEASURED: the largest resident set (VmRSS) among the {} MPI ranks "
                          "after MPI's start-up: binary, libraries, MPI buffers. The executor's "
                          "memory accounting does not count it.",
                          comm->ranks)
            : kept},
      {"gpu.fragmentation", "NOT MEASURED: allowance kept from " + r.base +
                                ". (The executor's own accounting counts tensor bytes exactly.)"},
      {"gpu.gemm_efficiency",
       fmt::format(
           "gemm_efficiency: MEASURED. Achieved FLOP/s of C[m x n] = A[m x k] B[k x n] over "
           "peak_fp32_tflops, through the executor's Backend::Gemm (cblas_sgemm, one thread): "
           "the mean time of the executor's three kinds of linear-layer products (X W^T, dY W, "
           "dY^T X), each the median of the repeats. Grid: m, n, k in {}; {} point(s) timed "
           "faster than the peak are written as 1. For comparison, the executor's element-wise "
           "kernels on {} KiB tensors reach (GB/s, reads + writes): {}. erf and exp make GeLU "
           "(and the softmax) compute-bound on a CPU, which the cost model times as memory-bound "
           "kernels.",
           axis, compute.clamped_points,
           compute.kernels.empty() ? 0 : compute.kernels.front().bytes >> 10, kernels)},
      {"node.gpus_per_node",
       fmt::format("Ranks on this machine: {} ({} online cores).", r.ranks_per_node, m.cores)},
      {"node.nvlink_gb_per_s",
       comm ? fmt::format("MEASURED: MPI point to point between ranks 0 and 1, one way (half a "
                          "ping-pong), the best over the message sizes ({} KiB).",
                          comm->p2p_bytes >> 10)
            : kept},
      {"node.nvlink_busbw_gb_per_s",
       comm ? fmt::format("MEASURED: MPI_Allreduce bus bandwidth over {} ranks, nccl-tests' "
                          "busbw = algbw * 2(n-1)/n, the best over the sizes (a GPU's plateau); "
                          "by size (GB/s): {}.",
                          comm->ranks, allreduce)
            : kept},
      {"node.nvlink_step_latency_us",
       comm ? "MEASURED: half an 8-byte MPI ping-pong between ranks 0 and 1." : kept},
      {"network.collective_base_latency_us",
       comm ? fmt::format("MEASURED: an 8-byte MPI_Allreduce over {} ranks ({:.3g} us) less its "
                          "2(n-1) steps of nvlink_step_latency_us, at least 0.",
                          comm->ranks, comm->allreduce_small_s * 1e6)
            : kept},
  };
}

}  // namespace

std::string CalibratedProfileYaml(const ClusterSpec& cluster, const CpuComputeFigures& compute,
                                  const std::optional<CommFigures>& comm,
                                  const CalibrationRecord& r) {
  const std::string kept = "NOT MEASURED: kept from " + r.base + ".";
  return AnnotatedClusterYaml(cluster, CpuProfileHeader(r, comm.has_value()),
                              CpuProfileNotes(compute, comm, r, kept), kept);
}

// --- the CUDA profile (the measurement itself is cuda.cu) ---

CudaCalibrateOptions CudaCalibrateOptions::Quick() {
  CudaCalibrateOptions o;
  o.gemm_axis = {1024, 4096};
  o.peak_size = 4096;
  o.attention_seq = {1024, 4096};
  o.repeats = 3;
  o.min_timing_s = 2e-3;
  o.copy_bytes = int64_t{256} << 20;
  o.launch_count = 2000;
  return o;
}

ClusterSpec CalibratedCudaCluster(const ClusterSpec& base, const CudaComputeFigures& f,
                                  const CudaCalibrationRecord& record) {
  PTDP_CHECK(base.gpu.peak_bf16_flops > 0 && base.gpu.hbm_bandwidth_bytes_per_s > 0);
  PTDP_CHECK(!f.gemm_bf16.empty() && f.copy_bytes_per_s > 0 && f.memory_bytes > 0);
  ClusterSpec c = base;
  c.name = record.name;
  c.description = fmt::format(
      "MEASURED by ptdp calibrate --backend cuda on {} ({}), {}: GEMMs, copy bandwidth, launch "
      "cost and the executor's attention; links and network kept from {}",
      f.device_name, record.host, record.date, base.name);
  GpuSpec& g = c.gpu;
  g.name = f.device_name;
  g.gemm_efficiency.clear();
  for (const CudaGemmFigure& p : f.gemm_bf16) {
    g.gemm_efficiency.push_back(
        {p.m, p.n, p.k, std::min(1.0, RoundSignificant(p.flops_per_s / g.peak_bf16_flops, 3))});
  }
  std::sort(g.gemm_efficiency.begin(), g.gemm_efficiency.end(), [](const auto& a, const auto& b) {
    return std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
  });
  // FP8 over the datasheet's FP8 peak, when both exist (else the base's table stays).
  if (!f.gemm_fp8.empty() && g.peak_fp8_flops > 0) {
    g.gemm_efficiency_fp8.clear();
    for (const CudaGemmFigure& p : f.gemm_fp8) {
      g.gemm_efficiency_fp8.push_back(
          {p.m, p.n, p.k, std::min(1.0, RoundSignificant(p.flops_per_s / g.peak_fp8_flops, 3))});
    }
    std::sort(g.gemm_efficiency_fp8.begin(), g.gemm_efficiency_fp8.end(),
              [](const auto& a, const auto& b) {
                return std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
              });
  }
  g.memory_efficiency =
      std::min(1.0, RoundSignificant(f.copy_bytes_per_s / g.hbm_bandwidth_bytes_per_s, 3));
  g.hbm_bytes = f.memory_bytes;
  g.reserved_bytes = f.used_at_start_bytes;
  g.flash_attention.clear();
  for (const CudaAttentionFigure& a : f.attention) {
    g.flash_attention.push_back(
        {a.seq_length,
         std::min(1.0, RoundSignificant(a.forward_flops_per_s / g.peak_bf16_flops, 3)),
         std::min(1.0, RoundSignificant(a.backward_flops_per_s / g.peak_bf16_flops, 3))});
  }
  std::sort(g.flash_attention.begin(), g.flash_attention.end(),
            [](const auto& a, const auto& b) { return a.seq_length < b.seq_length; });
  // The executor is C++ calling CUDA: one launch per kernel and nothing else on the host.
  c.host = HostSpec{};
  c.host.kernel_launch_s = Round3(f.launch_s, units::kMicrosecond);
  PTDP_CHECK(g.reserved_bytes < g.hbm_bytes);
  return ParseClusterYaml(WriteClusterYaml(c), "<calibrated profile>");
}

std::string CalibratedCudaProfileYaml(const ClusterSpec& cluster, const CudaComputeFigures& f,
                                      const CudaCalibrationRecord& r) {
  const std::string kept = "NOT MEASURED: kept from " + r.base + ".";
  auto tflops = [](double flops_per_s) { return fmt::format("{:.1f}", flops_per_s / 1e12); };
  auto grid = [&](const std::vector<CudaGemmFigure>& points) {
    std::string text;
    for (const CudaGemmFigure& p : points) {
      text += fmt::format("{}{}x{}x{} {}", text.empty() ? "" : ", ", p.m, p.n, p.k,
                          tflops(p.flops_per_s));
    }
    return text;
  };
  std::string header = CommentLines(
      fmt::format("{}: a hardware profile MEASURED on {} ({}, compute capability {}.{}, {} "
                  "multiprocessors, driver {}) on {} in {:.1f} s by `{}`.",
                  r.name, f.device_name, r.host, f.compute_capability / 10,
                  f.compute_capability % 10, f.multiprocessors, f.driver, r.date, r.elapsed_s,
                  r.command),
      0);
  header += CommentLines(
      "Timed with CUDA events around each region after a warm-up, random inputs, the median of "
      "the repeats. The datasheet peaks, NVLink, NICs, latencies and fragmentation are NOT "
      "measured (one GPU): kept from " +
          r.base + ".",
      0);
  header += CommentLines(
      fmt::format("Best square products of the peak size (TFLOP/s, cuBLASLt, fp32 accumulation): "
                  "bf16 {}, fp16 {}, fp32 {}.",
                  tflops(f.bf16_flops_per_s), tflops(f.fp16_flops_per_s),
                  tflops(f.fp32_flops_per_s)),
      0);
  header += CommentLines(
      f.gemm_fp8.empty()
          ? "fp8: not measured (" + (f.fp8_skipped.empty() ? "no figures" : f.fp8_skipped) + ")."
          : fmt::format("fp8 (E4M3 x E4M3 -> bf16, A transposed): best {} TFLOP/s; grid (TFLOP/s): "
                        "{}.",
                        tflops(f.fp8_flops_per_s), grid(f.gemm_fp8)),
      0);
  header += CommentLines("fp16 grid (TFLOP/s): " + grid(f.gemm_fp16) + ".", 0);
  header += CommentLines("fp32 grid (TFLOP/s): " + grid(f.gemm_fp32) + ".", 0);
  std::map<std::string, std::string> note = {
      {"name", "ptdp calibrate --name (default: the --out file's stem)."},
      {"gpu.name", "The device's name (cudaGetDeviceProperties)."},
      {"gpu.hbm_bytes", "MEASURED: cudaMemGetInfo's total."},
      {"gpu.memory_efficiency",
       fmt::format("MEASURED: a device-to-device cudaMemcpyAsync of {} MiB ({} GB/s, reads + "
                   "writes) over hbm_bandwidth (datasheet), at most 1.",
                   f.copy_bytes >> 20, Gb(f.copy_bytes_per_s))},
      {"gpu.reserved_bytes",
       "MEASURED: device memory in use (cudaMemGetInfo total - free) once the CUDA context, "
       "the stream and cuBLASLt with its workspace exist, before any tensor."},
      {"gpu.gemm_efficiency",
       "gemm_efficiency: MEASURED. Achieved FLOP/s of C[m x n] = A[m x k] B[k x n] in bf16 "
       "(cuBLASLt, fp32 accumulation) over peak_bf16_tflops: the mean time of the executor's "
       "three kinds of linear-layer products (X W^T, dY W, dY^T X), each the median of the "
       "repeats; at most 1."},
      {"gpu.flash_attention",
       fmt::format("flash_attention: MEASURED. The executor's own flash-style attention kernel "
                   "({}, causal, {} heads of {}, batch 1) by sequence length, forward and backward "
                   "FLOP/s (forward 2 s^2 d per head, backward 2.5 x that) over peak_bf16_tflops: "
                   "what `ptdp validate --backend cuda` needs to time the attention the executor "
                   "runs, not a library's kernel.",
                   f.attention_dtype, f.attention_heads, f.attention_head_dim)},
      {"host.kernel_launch_us",
       "MEASURED: host time per launch of an empty kernel, launched back to back (the executor "
       "is C++ calling CUDA directly)."},
      {"host.microbatch_overhead_us",
       "0: the executor has no Python or framework work per micro-batch worth a figure."},
      {"host.optimizer_step_us", "0: as above, per optimizer step."},
      {"host.moe_layer_us", "0: as above, per mixture-of-experts layer."},
  };
  if (!f.gemm_fp8.empty() && cluster.gpu.peak_fp8_flops > 0) {
    note["gpu.gemm_efficiency_fp8"] =
        "gemm_efficiency_fp8: MEASURED. Achieved FLOP/s of FP8 products (cuBLASLt, E4M3 operands, "
        "bf16 result, fp32 accumulation, the transposed-A order FP8 kernels take) over "
        "peak_fp8_tflops (datasheet), the median of the repeats; at most 1.";
  }
  return AnnotatedClusterYaml(cluster, header, note, kept);
}

}  // namespace ptdp
