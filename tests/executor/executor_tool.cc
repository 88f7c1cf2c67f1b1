// Helper for the command-line tests of `ptdp execute` (cli_tests.sh), so that they need no
// Python or jq:
//   executor_tool plan OUT [key=value ...]       write a tiny plan file (tiny_plan.h) with
//                                                 overrides: tp pp dp mbs v schedule sp
//                                                 recompute distopt cp cpcomm first last embsplit
//                                                 losssplit layers hidden heads seq gbs lr
//                                                 vocab llama groups name; MoE: ep etp experts
//                                                 topk expertffn shared dense capacity
//   executor_tool same-losses A.json B.json      B's per-step losses equal A's at the same
//                                                 steps, exactly (results JSON of ptdp execute)
//   executor_tool close-losses A.json B.json TOL B's per-step losses within TOL (relative) of
//                                                 A's (a CUDA run against the CPU's)
//   executor_tool check-trace TRACE.json PLAN    the measured trace is valid JSON and every
//                                                 rank's F/B/W operations of every step follow
//                                                 the plan's schedule list, one after another
//   executor_tool check-profile FILE RANKS       `ptdp calibrate`'s profile: the reader accepts
//                                                 it, writing and reading it back gives the same
//                                                 profile, gpus_per_node is RANKS, and the keys
//                                                 say MEASURED / NOT MEASURED as they should
//   executor_tool check-validation JSON STAGES   `ptdp validate --format json`: step time,
//                                                 bubble and each of STAGES stages' busy time and
//                                                 memory have a measured and a simulated value
// Exit code 0 when the check holds; 1 with the reason on stderr otherwise.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/schedule.h"
#include "core/spec_yaml.h"
#include "megatron/plan_file.h"
#include "tests/executor/tiny_plan.h"

namespace ptdp {
namespace {

using testing_executor::TinyLayout;
using testing_executor::TinyModel;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// --- a small JSON reader: values as a tree, enough for results and trace files ---
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  const Json& at(const std::string& key) const {
    const auto it = fields.find(key);
    if (it == fields.end()) throw std::runtime_error("missing key \"" + key + "\"");
    return it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  Json Document() {
    Json v = Value();
    Space();
    if (pos_ != s_.size()) Fail("text after the document");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) {
    throw std::runtime_error(fmt::format("invalid JSON at byte {}: {}", pos_, what));
  }
  void Space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    Space();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  void Expect(char c) {
    if (!Eat(c)) Fail(std::string("expected '") + c + "'");
  }
  std::string String() {
    Expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) Fail("control character in a string");
      if (c == '\\') {
        if (pos_ >= s_.size()) Fail("unfinished escape");
        c = s_[pos_++];
        if (c == 'u') {
          if (pos_ + 4 > s_.size()) Fail("short \\u escape");
          pos_ += 4;
          c = '?';
        } else if (std::string("\"\\/bfnrt").find(c) == std::string::npos) {
          Fail("bad escape");
        }
      }
      out += c;
    }
    Expect('"');
    return out;
  }
  Json Value() {
    Space();
    Json v;
    if (pos_ >= s_.size()) Fail("unexpected end");
    const char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      if (Eat('}')) return v;
      do {
        Space();
        std::string key = String();
        Expect(':');
        v.fields[key] = Value();
      } while (Eat(','));
      Expect('}');
    } else if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      if (Eat(']')) return v;
      do v.items.push_back(Value());
      while (Eat(','));
      Expect(']');
    } else if (c == '"') {
      v.kind = Json::kString;
      v.text = String();
    } else if (s_.compare(pos_, 4, "true") == 0 || s_.compare(pos_, 5, "false") == 0) {
      v.kind = Json::kBool;
      v.number = s_[pos_] == 't';
      pos_ += s_[pos_] == 't' ? 4 : 5;
    } else if (s_.compare(pos_, 4, "null") == 0) {
      pos_ += 4;
    } else {
      const char* begin = s_.c_str() + pos_;
      char* end = nullptr;
      v.kind = Json::kNumber;
      v.number = std::strtod(begin, &end);
      if (end == begin) Fail("expected a value");
      pos_ += static_cast<size_t>(end - begin);
    }
    return v;
  }
  const std::string& s_;
  size_t pos_ = 0;
};

Json ParseJsonFile(const std::string& path) { return JsonParser(ReadAll(path)).Document(); }

int WritePlan(int argc, char** argv) {
  TinyLayout l;
  TinyModel m;
  std::string name = "tiny";
  double capacity = 0;  // MoE: moe_expert_capacity_factor
  std::string cluster;  // a hardware profile preset instead of TinyPlan's cpu-local
  std::optional<Precision> precision;
  using Setter = std::function<void(const std::string&)>;
  auto integer = [](int* field) {
    return Setter([field](const std::string& v) { *field = std::stoi(v); });
  };
  auto flag = [](bool* field) {
    return Setter([field](const std::string& v) { *field = v == "true"; });
  };
  const std::map<std::string, Setter> setters = {
      {"tp", integer(&l.tp)},
      {"pp", integer(&l.pp)},
      {"dp", integer(&l.dp)},
      {"mbs", integer(&l.micro_batch)},
      {"v", integer(&l.virtual_stages)},
      {"schedule",
       [&](const std::string& v) { l.schedule = *ValueOf<Schedule>(kScheduleNames, v); }},
      {"sp", flag(&l.sequence_parallel)},
      {"recompute",
       [&](const std::string& v) { l.recompute = *ValueOf<Recompute>(kRecomputeNames, v); }},
      {"distopt", flag(&l.distributed_optimizer)},
      {"overlap", flag(&l.overlap_grad_reduce)},
      {"gather", flag(&l.overlap_param_gather)},
      {"bucket", [&](const std::string& v) { l.ddp_bucket_size = std::stoll(v); }},
      {"cp", integer(&l.cp)},
      {"cpcomm", [&](const std::string& v) { l.cp_comm = *ValueOf<CpComm>(kCpCommNames, v); }},
      {"first", integer(&l.first_stage_layers)},
      {"last", integer(&l.last_stage_layers)},
      {"embsplit", flag(&l.account_for_embedding)},
      {"losssplit", flag(&l.account_for_loss)},
      {"layers", integer(&m.layers)},
      {"hidden", integer(&m.hidden)},
      {"heads", integer(&m.heads)},
      {"seq", integer(&m.seq)},
      {"gbs", [&](const std::string& v) { m.global_batch = std::stoll(v); }},
      {"vocab", integer(&m.vocab)},
      {"lr", [&](const std::string& v) { m.lr = std::stod(v); }},
      {"llama", flag(&m.llama)},
      {"groups", integer(&m.groups)},
      {"ep", integer(&l.ep)},
      {"etp", integer(&l.etp)},
      {"experts", integer(&m.experts)},
      {"topk", integer(&m.topk)},
      {"expertffn", integer(&m.expert_ffn)},
      {"shared", integer(&m.shared_ffn)},
      {"dense", integer(&m.dense_layers)},
      {"capacity", [&](const std::string& v) { capacity = std::stod(v); }},
      {"name", [&](const std::string& v) { name = v; }},
      {"cluster", [&](const std::string& v) { cluster = v; }},
      {"attention",
       [&](const std::string& v) {
         l.attention = *ValueOf<AttentionBackend>(kAttentionBackendNames, v);
       }},
      {"precision",
       [&](const std::string& v) { precision = *ValueOf<Precision>(kPrecisionNames, v); }},
  };
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) throw std::runtime_error("expected key=value, got " + arg);
    const auto it = setters.find(arg.substr(0, eq));
    if (it == setters.end()) throw std::runtime_error("unknown key " + arg.substr(0, eq));
    it->second(arg.substr(eq + 1));
  }
  Plan plan = testing_executor::TinyPlan(l, m);
  plan.model.name = name;
  plan.model.moe_expert_capacity_factor = capacity;
  if (!cluster.empty()) plan.cluster = ClusterPreset(cluster);
  if (precision) plan.training.precision = *precision;
  std::ofstream(argv[2]) << WritePlanYaml(plan);
  return 0;
}

int SameLosses(const std::string& a_path, const std::string& b_path) {
  const Json a = ParseJsonFile(a_path), b = ParseJsonFile(b_path);
  const auto a0 = static_cast<size_t>(a.at("first_step").number);
  const auto b0 = static_cast<size_t>(b.at("first_step").number);
  const auto& al = a.at("losses").items;
  const auto& bl = b.at("losses").items;
  if (bl.empty()) throw std::runtime_error(b_path + " has no losses");
  for (size_t i = 0; i < bl.size(); ++i) {
    const size_t step = b0 + i;
    if (step < a0 || step - a0 >= al.size()) {
      throw std::runtime_error(fmt::format("{} has no step {}", a_path, step));
    }
    const double x = al[step - a0].number, y = bl[i].number;
    if (x != y) {
      std::cerr << fmt::format("step {}: {} in {} but {} in {}\n", step, x, a_path, y, b_path);
      return 1;
    }
  }
  std::cout << fmt::format("same losses at steps {}..{}\n", b0, b0 + bl.size() - 1);
  return 0;
}

int CloseLosses(const std::string& a_path, const std::string& b_path, double tolerance) {
  const Json a = ParseJsonFile(a_path), b = ParseJsonFile(b_path);
  const auto& al = a.at("losses").items;
  const auto& bl = b.at("losses").items;
  if (bl.empty() || al.size() != bl.size()) {
    throw std::runtime_error(
        fmt::format("{} has {} losses, {} has {}", a_path, al.size(), b_path, bl.size()));
  }
  double worst = 0;
  for (size_t i = 0; i < bl.size(); ++i) {
    const double x = al[i].number, y = bl[i].number;
    const double rel = std::abs(y - x) / std::max(std::abs(x), 1e-30);
    worst = std::max(worst, rel);
    if (!(rel <= tolerance)) {
      std::cerr << fmt::format("loss {}: {} in {} but {} in {} (relative difference {:.3g} > {})\n",
                               i + 1, x, a_path, y, b_path, rel, tolerance);
      return 1;
    }
  }
  std::cout << fmt::format("{} losses within {:.3g} relative (worst {:.3g})\n", bl.size(),
                           tolerance, worst);
  return 0;
}

int CheckTrace(const std::string& trace_path, const std::string& plan_path) {
  const Plan plan = LoadPlanFile(plan_path);
  const ParallelConfig& p = plan.parallel;
  const PipelineSchedule schedule = MakeSchedule(
      p.schedule, p.pp, static_cast<int>(NumMicrobatches(plan.training, p)), p.virtual_stages);
  const Json trace = ParseJsonFile(trace_path);
  // Per rank (tid): its operations per step, from the "step N" intervals around them.
  struct Op {
    double start, end;
    std::string name;
  };
  std::map<int, std::vector<Op>> ops, steps;
  for (const Json& e : trace.at("traceEvents").items) {
    if (e.at("ph").text != "X") continue;
    const int tid = static_cast<int>(e.at("tid").number);
    const std::string cat = e.at("cat").text;
    const Op op{e.at("ts").number, e.at("ts").number + e.at("dur").number, e.at("name").text};
    if (cat == "forward" || cat == "backward" || cat == "weight-grad") ops[tid].push_back(op);
    if (cat == "other" && op.name.rfind("step ", 0) == 0) steps[tid].push_back(op);
  }
  if (static_cast<int64_t>(ops.size()) != p.world_size()) {
    std::cerr << fmt::format("{} ranks have operations, the plan has {}\n", ops.size(),
                             p.world_size());
    return 1;
  }
  for (auto& [rank, list] : ops) {
    const int stage = rank / (p.tp * p.cp * p.dp);  // Megatron's order: pp varies slowest
    std::vector<std::string> expected;
    for (const PipelineOp& op : schedule.ops[static_cast<size_t>(stage)]) {
      std::string s = fmt::format("{}{}", Letter(op.kind), op.microbatch);
      if (schedule.chunks > 1) s += fmt::format(".{}", op.chunk);
      expected.push_back(s);
    }
    std::sort(list.begin(), list.end(), [](const Op& x, const Op& y) { return x.start < y.start; });
    const auto& st = steps[rank];
    if (st.empty()) {
      std::cerr << fmt::format("rank {}: no step intervals\n", rank);
      return 1;
    }
    size_t k = 0;
    for (size_t s = 0; s < st.size(); ++s) {
      for (const std::string& want : expected) {
        if (k >= list.size() || list[k].name != want || list[k].start < st[s].start ||
            list[k].end > st[s].end || (k > 0 && list[k].start < list[k - 1].end)) {
          std::cerr << fmt::format("rank {} step {}: expected {} as operation {}, found {}\n", rank,
                                   s + 1, want, k, k < list.size() ? list[k].name : "nothing");
          return 1;
        }
        ++k;
      }
    }
    std::string first;
    for (size_t i = 0; i < expected.size(); ++i) first += (i ? " " : "") + expected[i];
    std::cout << fmt::format("rank {} (stage {}): {} steps of {}\n", rank, stage, st.size(), first);
  }
  return 0;
}

int CheckProfile(const std::string& path, int ranks) {
  const std::string text = ReadAll(path);
  const ClusterSpec profile = ParseClusterYaml(text, path);
  const ClusterSpec again = ParseClusterYaml(WriteClusterYaml(profile), path + " (rewritten)");
  if (!(again == profile)) throw std::runtime_error("the profile does not round-trip");
  if (profile.gpus_per_node != ranks) {
    throw std::runtime_error(
        fmt::format("gpus_per_node {}, expected {}", profile.gpus_per_node, ranks));
  }
  // The comment block above each key says how it was obtained.
  const std::map<std::string, bool> measured = {
      {"peak_fp32_tflops:", true},      {"hbm_bandwidth_gb_per_s:", true},
      {"memory_efficiency:", true},     {"reserved_bytes:", true},
      {"nvlink_busbw_gb_per_s:", true}, {"nvlink_step_latency_us:", true},
      {"gemm_efficiency:", true},       {"nic_busbw_gb_per_s:", false},
      {"nic_step_latency_us:", false},  {"fragmentation:", false}};
  std::istringstream lines(text);
  std::string comment;
  int checked = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find_first_not_of(' ');
    if (at == std::string::npos) continue;
    if (line[at] == '#') {
      comment += line + "\n";
      continue;
    }
    for (const auto& [key, is_measured] : measured) {
      if (line.compare(at, key.size(), key) != 0) continue;
      const bool says_not = comment.find("NOT MEASURED") != std::string::npos;
      const bool says = comment.find("MEASURED") != std::string::npos;
      if (is_measured ? (says_not || !says) : !says_not) {
        throw std::runtime_error(fmt::format("{} is not marked {}MEASURED:\n{}", key,
                                             is_measured ? "" : "NOT ", comment));
      }
      ++checked;
    }
    comment.clear();
  }
  if (checked != static_cast<int>(measured.size())) {
    throw std::runtime_error(fmt::format("found {} of {} keys", checked, measured.size()));
  }
  std::cout << fmt::format("{}: {} GEMM points, peak {} TFLOP/s, busbw {} GB/s: ok\n", path,
                           profile.gpu.gemm_efficiency.size(), profile.gpu.peak_fp32_flops / 1e12,
                           profile.nvlink_busbw_bytes_per_s / 1e9);
  return 0;
}

int CheckValidation(const std::string& path, size_t stages) {
  const Json v = ParseJsonFile(path);
  auto both = [&](const Json& figure, const std::string& name, bool positive) {
    const Json& m = figure.at("measured");
    const Json& s = figure.at("simulated");
    const Json& e = figure.at("error");
    if (m.kind != Json::kNumber || s.kind != Json::kNumber || e.kind != Json::kNumber ||
        (positive && (m.number <= 0 || s.number <= 0))) {
      throw std::runtime_error(name + ": measured and simulated values missing");
    }
  };
  both(v.at("step_time_s"), "step_time_s", true);
  both(v.at("bubble_fraction"), "bubble_fraction", false);
  if (v.at("stages").items.size() != stages) {
    throw std::runtime_error(
        fmt::format("{} stages, expected {}", v.at("stages").items.size(), stages));
  }
  for (const Json& st : v.at("stages").items) {
    both(st.at("busy_s"), "busy_s", true);
    for (const char* c : {"weights", "gradients", "optimizer", "activations", "total"}) {
      both(st.at("memory_bytes").at(c), c, true);
    }
  }
  if (v.at("simulation").at("step_time_s").number != v.at("step_time_s").at("simulated").number) {
    throw std::runtime_error("the embedded simulation disagrees with step_time_s");
  }
  std::cout << fmt::format("{}: step time measured {:.4f} s, simulated {:.4f} s; {} stage(s): ok\n",
                           path, v.at("step_time_s").at("measured").number,
                           v.at("step_time_s").at("simulated").number, stages);
  return 0;
}

}  // namespace
}  // namespace ptdp

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "plan" && argc >= 3) return ptdp::WritePlan(argc, argv);
    if (cmd == "same-losses" && argc == 4) return ptdp::SameLosses(argv[2], argv[3]);
    if (cmd == "check-trace" && argc == 4) return ptdp::CheckTrace(argv[2], argv[3]);
    if (cmd == "close-losses" && argc == 5) {
      return ptdp::CloseLosses(argv[2], argv[3], std::stod(argv[4]));
    }
    if (cmd == "check-profile" && argc == 4) return ptdp::CheckProfile(argv[2], std::stoi(argv[3]));
    if (cmd == "check-validation" && argc == 4) {
      return ptdp::CheckValidation(argv[2], std::stoul(argv[3]));
    }
    std::cerr << "usage: executor_tool plan OUT [k=v...] | same-losses A B | close-losses A B TOL |"
                 " check-trace T PLAN |"
                 " check-profile FILE RANKS | check-validation JSON STAGES\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "executor_tool: " << e.what() << "\n";
    return 1;
  }
}
