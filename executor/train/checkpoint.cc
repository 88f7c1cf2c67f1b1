#include "executor/train/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/spec_yaml.h"
#include "core/yaml_io.h"
#include "executor/model/rng.h"

namespace ptdp {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'P', 'T', 'D', 'P', 'C', 'K', 'P', '1'};

std::string StepDirName(int64_t step) { return fmt::format("step-{:08d}", step); }
std::string RankFileName(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

InputError LoadError(const std::string& path, const std::string& message,
                     const std::string& hint = "") {
  return InputError({path, 0, ""}, message, hint);
}

constexpr char kSameLayout[] = "checkpoints load into the layout that saved them";

// Writes `data` to `path` through a temporary file beside it, flushed to disk, then renamed
// (core/atomic_file.h); a failed write leaves no temporary file behind (a full disk is not
// filled further by retries). `on_half` (tests) runs when half of the bytes are written.
void WriteAtomically(const fs::path& path, const std::string& data,
                     const std::function<void()>& on_half = {}) {
  std::string tmp;
  try {
    tmp = WriteTemporaryBeside(path.string(), data, /*sync=*/true, on_half);
  } catch (const std::system_error& e) {
    throw InputError({path.string(), 0, "--save"},
                     fmt::format("cannot write the file: {}", e.code().message()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw InputError({path.string(), 0, "--save"}, "cannot rename into place: " + ec.message());
  }
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError(path.string(), "cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Header lines "key=value\n", then an empty line, then the tensors, then an FNV-1a checksum.
std::string Header(const CheckpointState& s, const std::string& layout, int rank,
                   const std::vector<int64_t>& sizes) {
  std::string h = fmt::format("step={}\nsequences_consumed={}\nseed={}\nrank={}\n", s.step,
                              s.sequences_consumed, s.seed, rank);
  for (size_t i = 0; i < sizes.size(); ++i) h += fmt::format("tensor{}_bytes={}\n", i, sizes[i]);
  h += "layout=" + layout + "\n\n";
  return h;
}

// The value of the header's line "key=value", if it has one.
std::optional<std::string_view> FindField(std::string_view header, std::string_view key) {
  size_t at = 0;
  while (at < header.size()) {
    const size_t end = std::min(header.find('\n', at), header.size());
    const std::string_view line = header.substr(at, end - at);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == '=') {
      return line.substr(key.size() + 1);
    }
    at = end + 1;
  }
  return std::nullopt;
}

// The value of "key=value" in the header; InputError naming `file` if it is missing.
std::string_view Field(std::string_view header, std::string_view key, const std::string& file) {
  if (const auto value = FindField(header, key)) return *value;
  throw LoadError(file, fmt::format("the header has no {}", key));
}

// A header field that must be a non-negative integer.
int64_t Count(std::string_view header, std::string_view key, const std::string& file) {
  const std::string_view text = Field(header, key, file);
  int64_t value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    throw LoadError(file, fmt::format("the header's {} is not a count: \"{}\"", key, text));
  }
  return value;
}

fs::path ResolveStepDir(const std::string& dir) {
  const fs::path root(dir);
  if (fs::exists(root / "manifest.yaml")) return root;
  const fs::path latest = root / "latest";
  if (!fs::exists(latest)) {
    throw InputError({dir, 0, "--load"},
                     "no checkpoint here (neither a `latest` file nor a manifest.yaml)");
  }
  std::string name = ReadFile(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path step_dir = root / name;
  if (!fs::exists(step_dir / "manifest.yaml")) {
    throw LoadError((step_dir / "manifest.yaml").string(),
                    "the manifest that `latest` names is missing");
  }
  return step_dir;
}

// A save killed before its manifest leaves a step folder without one (rank files, temporary
// files), or a temporary `latest`: nothing can load them, and a disk filled by such leftovers
// would fail the next save. Removed before each save (by rank 0, before any rank writes).
void RemoveIncompleteSaves(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool incomplete_step = entry.is_directory(ec) && name.rfind("step-", 0) == 0 &&
                                 !fs::exists(entry.path() / "manifest.yaml", ec);
    if (incomplete_step || name.rfind("latest.tmp", 0) == 0) fs::remove_all(entry.path(), ec);
  }
}

}  // namespace

std::string CheckpointLayout(const Plan& plan, DType dtype) {
  const ParallelConfig& p = plan.parallel;
  std::string model = WriteModelYaml(plan.model);
  for (char& c : model) {
    if (c == '\n') c = ';';
  }
  // An uneven split changes which layers each rank holds; the even split's text is unchanged
  // so that earlier checkpoints still match.
  const std::string split =
      UnevenSplit(p) ? fmt::format(" split first {} last {} embedding {} loss {}",
                                   p.first_stage_layers, p.last_stage_layers,
                                   p.account_for_embedding ? 1 : 0, p.account_for_loss ? 1 : 0)
                     : "";
  // Context parallelism changes the distributed optimizer's shards (over dp x cp); cp 1 keeps
  // the earlier text.
  const std::string cp = p.cp > 1 ? fmt::format(" cp {}", p.cp) : "";
  // The expert grid decides which experts (and which of their slices) a rank holds and the
  // distributed optimizer's expert shards; dense models keep the earlier text.
  const std::string experts =
      plan.model.moe() ? fmt::format(" ep {} etp {}", p.ep, p.expert_tp()) : "";
  // Overlapped, the distributed optimizer shards each DDP bucket instead of the whole range.
  const std::string buckets =
      plan.options.overlap_grad_reduce && p.distributed_optimizer
          ? fmt::format(" ddp_buckets {}", DdpBucketParameters(plan.options, p.dp_cp()))
          : "";
  return fmt::format(
      "tp {} pp {} dp {}{}{} virtual_stages {}{} distributed_optimizer {}{} global_batch {} "
      "optimizer {} {} | {}",
      p.tp, p.pp, p.dp, cp, experts, p.virtual_stages, split, p.distributed_optimizer ? 1 : 0,
      buckets, plan.training.global_batch_size, Name(plan.training.optimizer), Name(dtype), model);
}

void SaveCheckpoint(const std::string& dir, const CheckpointState& state, const std::string& layout,
                    Span params, const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                    Backend& backend, const SaveFaultHook& fault_hook) {
  const fs::path step_dir = fs::path(dir) / StepDirName(state.step);
  if (groups.world->rank() == 0) {
    RemoveIncompleteSaves(dir);
    std::error_code ec;
    fs::create_directories(step_dir, ec);
    if (ec) throw InputError({step_dir.string(), 0, "--save"}, "cannot create: " + ec.message());
  }
  groups.world->Barrier();

  std::vector<Span> tensors{params};
  tensors.insert(tensors.end(), optimizer_state.begin(), optimizer_state.end());
  std::vector<int64_t> sizes;
  for (const Span& t : tensors) sizes.push_back(t.bytes());
  std::string blob(kMagic, sizeof(kMagic));
  blob += Header(state, layout, groups.world->rank(), sizes);
  for (const Span& t : tensors) {
    const size_t at = blob.size();
    blob.resize(at + static_cast<size_t>(t.bytes()));
    backend.Download(t, blob.data() + at);
  }
  const uint64_t sum = Fnv1a64(blob);
  blob.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  std::function<void()> on_half;
  if (fault_hook) on_half = [&fault_hook] { fault_hook("rank file half written"); };
  WriteAtomically(step_dir / RankFileName(groups.world->rank()), blob, on_half);
  groups.world->Barrier();  // every rank's file is in place

  if (fault_hook) fault_hook("rank files written");
  if (groups.world->rank() == 0) {
    std::string manifest = fmt::format(
        "# ptdp checkpoint: one rank-NNNNN.bin per rank (ptdp execute --load {})\n"
        "format: ptdp-checkpoint\nversion: 1\nstep: {}\nsequences_consumed: {}\nseed: {}\n"
        "world_size: {}\nlayout: {}\n",
        dir, state.step, state.sequences_consumed, state.seed, groups.world->size(),
        YamlQuote(layout));
    WriteAtomically(step_dir / "manifest.yaml", manifest);
    WriteAtomically(fs::path(dir) / "latest", StepDirName(state.step) + "\n");
  }
  groups.world->Barrier();  // committed before anyone moves on
}

CheckpointRankFile ParseCheckpointRankFile(std::string_view blob, const std::string& file) {
  if (blob.size() < sizeof(kMagic) + sizeof(uint64_t) ||
      std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    throw LoadError(file, "not a ptdp checkpoint file");
  }
  uint64_t stored = 0;
  const size_t body_end = blob.size() - sizeof(stored);
  std::memcpy(&stored, blob.data() + body_end, sizeof(stored));
  if (Fnv1a64(blob.substr(0, body_end)) != stored) {
    throw LoadError(file, "checksum mismatch: the file is corrupt or truncated");
  }
  const size_t header_end = blob.find("\n\n", sizeof(kMagic));
  if (header_end == std::string_view::npos || header_end >= body_end) {
    throw LoadError(file, "the header does not end");
  }
  const std::string_view header = blob.substr(sizeof(kMagic), header_end + 1 - sizeof(kMagic));
  CheckpointRankFile f;
  f.state.step = Count(header, "step", file);
  f.state.sequences_consumed = Count(header, "sequences_consumed", file);
  f.state.seed = Count(header, "seed", file);
  f.rank = Count(header, "rank", file);
  f.layout = std::string(Field(header, "layout", file));
  size_t at = header_end + 2;
  for (int i = 0; FindField(header, fmt::format("tensor{}_bytes", i)); ++i) {
    const int64_t bytes = Count(header, fmt::format("tensor{}_bytes", i), file);
    if (static_cast<uint64_t>(bytes) > body_end - at) {
      throw LoadError(file,
                      fmt::format("tensor {} ({} bytes) runs past the end of the file", i, bytes));
    }
    f.tensors.emplace_back(at, static_cast<size_t>(bytes));
    at += static_cast<size_t>(bytes);
  }
  if (at != body_end) {
    throw LoadError(file, fmt::format("{} bytes after the last tensor", body_end - at));
  }
  return f;
}

CheckpointManifest ParseCheckpointManifest(std::string_view text, const std::string& file) {
  const YAML::Node root = ParseYamlDocument(text, file);
  const YamlMap map(root, file, "", 1);
  if (map.String("format") != "ptdp-checkpoint" || map.Int("version") != 1) {
    throw LoadError(file, "not a ptdp checkpoint manifest (format ptdp-checkpoint, version 1)");
  }
  auto count = [&map](std::string_view key) {
    const int64_t value = map.Int(key);
    if (value < 0) map.Fail(key, fmt::format("must not be negative, got {}", value));
    return value;
  };
  CheckpointManifest m;
  m.state.step = count("step");
  m.state.sequences_consumed = count("sequences_consumed");
  m.state.seed = count("seed");
  m.world_size = map.PositiveInt("world_size");
  m.layout = map.String("layout");
  map.RejectUnknownKeys();
  return m;
}

CheckpointState LoadCheckpoint(const std::string& dir, const std::string& layout, Span params,
                               const std::vector<Span>& optimizer_state, ProcessGroups& groups,
                               Backend& backend) {
  const fs::path step_dir = ResolveStepDir(dir);
  const std::string manifest_path = (step_dir / "manifest.yaml").string();
  const CheckpointManifest manifest =
      ParseCheckpointManifest(ReadFile(manifest_path), manifest_path);
  if (manifest.world_size != groups.world->size()) {
    throw LoadError(manifest_path,
                    fmt::format("saved by {} ranks; this run has {}", manifest.world_size,
                                groups.world->size()),
                    kSameLayout);
  }
  if (manifest.layout != layout) {
    throw LoadError(manifest_path,
                    "saved with a different model or layout:\n  saved: " + manifest.layout +
                        "\n  now:   " + layout,
                    kSameLayout);
  }
  const int rank = groups.world->rank();
  const fs::path path = step_dir / RankFileName(rank);
  const std::string file = path.string();
  const std::string blob = ReadFile(path);
  const CheckpointRankFile f = ParseCheckpointRankFile(blob, file);
  // The file must be this rank's, from the save the manifest describes: a swapped or stale
  // file passes its own checksum but would train on wrong weights or desynchronise the ranks.
  if (f.rank != rank) {
    throw LoadError(file, fmt::format("holds rank {}'s state, not rank {}'s (renamed or swapped "
                                      "files?)",
                                      f.rank, rank));
  }
  if (f.state.step != manifest.state.step ||
      f.state.sequences_consumed != manifest.state.sequences_consumed ||
      f.state.seed != manifest.state.seed) {
    throw LoadError(file, fmt::format("is from step {}, but the manifest is step {}: a file of "
                                      "another save",
                                      f.state.step, manifest.state.step));
  }
  if (f.layout != layout) {
    throw LoadError(
        file,
        "saved with a different model or layout:\n  saved: " + f.layout + "\n  now:   " + layout,
        kSameLayout);
  }
  std::vector<Span> tensors{params};
  tensors.insert(tensors.end(), optimizer_state.begin(), optimizer_state.end());
  if (f.tensors.size() != tensors.size()) {
    throw LoadError(file,
                    fmt::format("holds {} tensors, expected {}", f.tensors.size(), tensors.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto [offset, bytes] = f.tensors[i];
    if (static_cast<int64_t>(bytes) != tensors[i].bytes()) {
      throw LoadError(
          file, fmt::format("tensor {} has {} bytes, expected {}", i, bytes, tensors[i].bytes()));
    }
    backend.Upload(tensors[i], blob.data() + offset);
  }
  groups.world->Barrier();
  return f.state;
}

}  // namespace ptdp
