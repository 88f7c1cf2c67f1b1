#include "executor/train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
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
constexpr char kLockName[] = ".ptdp-save.lock";
constexpr int kManifestVersion = 2;  // 1: without run ids

std::string StepDirName(int64_t step) { return fmt::format("step-{:08d}", step); }
std::string RankFileName(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

InputError LoadError(const std::string& path, const std::string& message,
                     const std::string& hint = "") {
  return InputError({path, 0, ""}, message, hint);
}

constexpr char kSameLayout[] = "checkpoints load into the layout that saved them";

// The whole of a file; nothing when it cannot be opened.
std::optional<std::string> ReadIfThere(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ReadFile(const fs::path& path) {
  std::optional<std::string> text = ReadIfThere(path);
  if (!text) throw LoadError(path.string(), "cannot read the file");
  return std::move(*text);
}

std::string ThisHost() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) return "unknown";
  return host.data();
}

// A save lock's holder, as its file says.
struct LockHolder {
  std::string text;  // the whole file
  int64_t pid = -1;
  std::string host, run_id;
};

// The value of the line "key=value" in `text`, if it has one.
std::optional<std::string_view> FindField(std::string_view text, std::string_view key);

// The lock file's holder; nullopt when there is no lock file.
std::optional<LockHolder> ReadLock(const fs::path& file) {
  std::optional<std::string> text = ReadIfThere(file);
  if (!text) return std::nullopt;
  LockHolder h;
  h.text = std::move(*text);
  const auto pid = FindField(h.text, "pid");
  if (pid) (void)std::from_chars(pid->data(), pid->data() + pid->size(), h.pid);
  h.host = std::string(FindField(h.text, "host").value_or("?"));
  h.run_id = std::string(FindField(h.text, "run").value_or("?"));
  return h;
}

std::string Describe(const LockHolder& h) {
  return fmt::format("pid {} on host {} (run {})", h.pid, h.host, h.run_id);
}

// Whether process `pid` has exited but not been reaped (a zombie: state Z in /proc/PID/stat, the
// field after the parenthesised command name). A killed job's ranks stay so where their parent
// (a container's first process, say) does not reap them, and they run nothing.
bool IsZombie(int64_t pid) {
  const std::string text = ReadIfThere("/proc/" + std::to_string(pid) + "/stat").value_or("");
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

// A lock left by a process of this host that no longer runs (kill(pid, 0): no such process; or
// a zombie).
bool IsStale(const LockHolder& h) {
  if (h.pid <= 0 || h.host != ThisHost()) return false;
  if (::kill(static_cast<pid_t>(h.pid), 0) != 0) return errno == ESRCH;
  return IsZombie(h.pid);
}

constexpr char kLockHint[] =
    "two jobs saving into one folder would mix their checkpoints: wait for that job or save "
    "elsewhere; if no such job runs any more, remove the lock file";

// World rank 0's save lock on a save folder (checkpoint.h): held from construction, removed on
// destruction when the file is still this lock's.
class SaveLock {
 public:
  SaveLock(const fs::path& dir, const std::string& run_id) : file_(dir / kLockName) {
    text_ = fmt::format("pid={}\nhost={}\nrun={}\n", ::getpid(), ThisHost(), run_id);
    // A few tries: the holder may remove its lock between our open and our read, and a stale
    // lock is removed once before trying again.
    for (int attempt = 0; attempt < 4; ++attempt) {
      const int fd = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        const bool written =
            ::write(fd, text_.data(), text_.size()) == static_cast<ssize_t>(text_.size());
        const int error = errno;
        ::close(fd);
        if (!written) {
          ::unlink(file_.c_str());
          throw InputError({file_.string(), 0, "--save"},
                           "cannot write the save lock: " + std::generic_category().message(error));
        }
        return;
      }
      if (errno != EEXIST) {
        throw InputError({file_.string(), 0, "--save"},
                         "cannot create the save lock: " + std::generic_category().message(errno));
      }
      const std::optional<LockHolder> holder = ReadLock(file_);
      if (!holder) continue;  // released meanwhile
      if (attempt == 0 && IsStale(*holder)) {
        ::unlink(file_.c_str());  // its process is gone: a save killed in the middle
        continue;
      }
      throw InputError({file_.string(), 0, "--save"},
                       fmt::format("another job is writing checkpoints here: {} holds this lock",
                                   Describe(*holder)),
                       kLockHint);
    }
    throw InputError({file_.string(), 0, "--save"},
                     "cannot take the save lock: other jobs keep taking it", kLockHint);
  }
  ~SaveLock() {
    const std::optional<LockHolder> holder = ReadLock(file_);
    if (holder && holder->text == text_) ::unlink(file_.c_str());
  }
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;
  const std::string& text() const { return text_; }

 private:
  fs::path file_;
  std::string text_;
};

// Where a save writes: its folder and the text of the lock this save holds (read by every rank
// once world rank 0 has taken it).
struct SaveSite {
  fs::path dir;
  std::string lock_text;
};

// Why a write into the save folder may have failed: another job writing there (its save removes
// a step folder without a manifest, this save's), as the lock says; "" when the lock is this
// save's.
std::string OtherWriter(const SaveSite& site) {
  const fs::path file = site.dir / kLockName;
  const std::optional<LockHolder> holder = ReadLock(file);
  if (!holder) {
    return fmt::format("; this save's lock {} is gone: another job may be writing here",
                       file.string());
  }
  if (holder->text == site.lock_text) return "";
  return fmt::format("; another job is writing checkpoints here: {} holds {}", Describe(*holder),
                     file.string());
}

// Writes `data` to `path` through a temporary file beside it, flushed to disk, then renamed
// (core/atomic_file.h); a failed write leaves no temporary file behind (a full disk is not
// filled further by retries). `on_half` (tests) runs when half of the bytes are written.
void WriteAtomically(const fs::path& path, const std::string& data, const SaveSite& site,
                     const std::function<void()>& on_half = {}) {
  std::string tmp;
  try {
    tmp = WriteTemporaryBeside(path.string(), data, /*sync=*/true, on_half);
  } catch (const std::system_error& e) {
    throw InputError(
        {path.string(), 0, "--save"},
        fmt::format("cannot write the file: {}{}", e.code().message(), OtherWriter(site)));
  }
  std::error_code rename_error;
  fs::rename(tmp, path, rename_error);
  if (rename_error) {
    std::error_code ignored;  // the rename's error is the one to report
    fs::remove(tmp, ignored);
    throw InputError(
        {path.string(), 0, "--save"},
        fmt::format("cannot rename into place: {}{}", rename_error.message(), OtherWriter(site)));
  }
}

// Header lines "key=value\n", then an empty line, then the tensors, then an FNV-1a checksum.
std::string Header(const CheckpointState& s, const std::string& layout, int rank,
                   const std::vector<int64_t>& sizes) {
  std::string h = fmt::format("step={}\nsequences_consumed={}\nseed={}\nrank={}\nrun={}\n", s.step,
                              s.sequences_consumed, s.seed, rank, s.run_id);
  for (size_t i = 0; i < sizes.size(); ++i) h += fmt::format("tensor{}_bytes={}\n", i, sizes[i]);
  h += "layout=" + layout + "\n\n";
  return h;
}

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

// The run id in a manifest; nullopt when it does not read.
std::optional<std::string> ManifestRunId(const fs::path& manifest) {
  try {
    return ParseCheckpointManifest(ReadFile(manifest), manifest.string()).state.run_id;
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// Who saved a checkpoint, for messages.
std::string RunName(const std::optional<std::string>& run_id) {
  if (!run_id) return "a run whose manifest does not read";
  if (run_id->empty()) return "a run of checkpoint format version 1 (no run id)";
  return "run " + *run_id;
}

// A checkpoint in a save folder that is not this run's: whose, and where.
struct OtherRun {
  std::string who;    // "run 0123...", or what is known of it
  std::string where;  // what in the folder is that run's
};

// The first checkpoint in `dir` that is not `run_id`'s ("": every one is another run's):
// `latest`'s, then the step folders' in order, then a save lock's whose holder may still run.
std::optional<OtherRun> FindOtherRun(const fs::path& dir, const std::string& run_id) {
  auto other = [&run_id](const std::optional<std::string>& id) {
    return run_id.empty() || !id || *id != run_id;
  };
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  if (fs::exists(dir / "latest", ec)) {
    std::string name;
    try {
      name = ReadFile(dir / "latest");
    } catch (const InputError&) {
    }
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const fs::path manifest = dir / name / "manifest.yaml";
    if (name.empty() || !fs::exists(manifest, ec)) {
      if (!run_id.empty()) return OtherRun{"an unknown run", "`latest`, naming no checkpoint"};
      return OtherRun{"an unknown run", "a `latest` file"};
    }
    const std::optional<std::string> id = ManifestRunId(manifest);
    if (other(id)) return OtherRun{RunName(id), name + ", which `latest` names"};
  }
  std::vector<std::string> steps;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && fs::exists(entry.path() / "manifest.yaml", ec)) {
      steps.push_back(name);
    }
  }
  std::sort(steps.begin(), steps.end());
  for (const std::string& name : steps) {
    const std::optional<std::string> id = ManifestRunId(dir / name / "manifest.yaml");
    if (other(id)) return OtherRun{RunName(id), name};
  }
  const std::optional<LockHolder> lock = ReadLock(dir / kLockName);
  if (lock && !IsStale(*lock) && (run_id.empty() || lock->run_id != run_id)) {
    return OtherRun{RunName(lock->run_id),
                    fmt::format("a save under way: {} holds {}", Describe(*lock), kLockName)};
  }
  return std::nullopt;
}

// `path` made absolute and normal, without a trailing separator.
fs::path Normal(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) p = fs::absolute(path);
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

}  // namespace

std::string NewRunId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", static_cast<uint32_t>(random()));
  return id;
}

bool IsRunId(std::string_view text) {
  return text.size() == 32 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string CheckpointRankFilePath(const std::string& dir, int64_t step, int rank) {
  return (fs::path(dir) / StepDirName(step) / RankFileName(rank)).string();
}

void CheckSaveFolder(const std::string& save_dir, const std::string& run_id,
                     bool replace_other_runs) {
  if (replace_other_runs) return;
  const std::optional<OtherRun> other = FindOtherRun(save_dir, run_id);
  if (!other) return;
  throw InputError(
      {save_dir, 0, "--save"},
      fmt::format("holds the checkpoints of {} ({}), and this run is {}: two runs saving into "
                  "one folder would mix their checkpoints",
                  other->who, other->where, run_id.empty() ? "a new one" : "run " + run_id),
      fmt::format("resume that run with --load {} (the same run, saving on), or give "
                  "--save-overwrite to save this run over it",
                  save_dir));
}

bool ResumesFromFolder(const std::string& load_dir, const std::string& save_dir) {
  if (load_dir.empty() || save_dir.empty()) return false;
  const fs::path load = Normal(load_dir), save = Normal(save_dir);
  return load == save || load.parent_path() == save;
}

std::string CheckpointRunId(const std::string& dir) {
  const std::string manifest = (ResolveStepDir(dir) / "manifest.yaml").string();
  return ParseCheckpointManifest(ReadFile(manifest), manifest).state.run_id;
}

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
                    Backend& backend, const SaveOptions& options) {
  PTDP_CHECK(IsRunId(state.run_id));
  const SaveFaultHook& fault_hook = options.fault_hook;
  if (fault_hook) fault_hook("save begun");
  const fs::path step_dir = fs::path(dir) / StepDirName(state.step);
  const bool root = groups.world->rank() == 0;
  std::optional<SaveLock> lock;
  if (root) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw InputError({dir, 0, "--save"}, "cannot create: " + ec.message());
    lock.emplace(dir, state.run_id);
    // Checked at start-up too; another run may have saved here since.
    CheckSaveFolder(dir, state.run_id, options.replace_other_runs);
    RemoveIncompleteSaves(dir);
    fs::create_directories(step_dir, ec);
    if (ec) throw InputError({step_dir.string(), 0, "--save"}, "cannot create: " + ec.message());
  }
  groups.world->Barrier();
  const std::optional<LockHolder> holder = ReadLock(fs::path(dir) / kLockName);
  const SaveSite site{dir, root ? lock->text() : holder ? holder->text : ""};

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
  WriteAtomically(step_dir / RankFileName(groups.world->rank()), blob, site, on_half);
  groups.world->Barrier();  // every rank's file is in place

  if (fault_hook) fault_hook("rank files written");
  if (root) {
    std::string manifest = fmt::format(
        "# ptdp checkpoint: one rank-NNNNN.bin per rank (ptdp execute --load {})\n"
        "format: ptdp-checkpoint\nversion: {}\nrun: {}\nstep: {}\nsequences_consumed: {}\n"
        "seed: {}\nworld_size: {}\nlayout: {}\n",
        dir, kManifestVersion, state.run_id, state.step, state.sequences_consumed, state.seed,
        groups.world->size(), YamlQuote(layout));
    WriteAtomically(step_dir / "manifest.yaml", manifest, site);
    WriteAtomically(fs::path(dir) / "latest", StepDirName(state.step) + "\n", site);
    lock.reset();
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
  if (const auto run = FindField(header, "run")) {  // none in format version 1
    if (!IsRunId(*run)) {
      throw LoadError(file, fmt::format("the header's run is not a run id (32 lowercase hex "
                                        "digits): \"{}\"",
                                        *run));
    }
    f.state.run_id = std::string(*run);
  }
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
  if (map.String("format") != "ptdp-checkpoint") {
    throw LoadError(file, "not a ptdp checkpoint manifest (format ptdp-checkpoint)");
  }
  const int64_t version = map.Int("version");
  if (version < 1 || version > kManifestVersion) {
    map.Fail("version", fmt::format("this ptdp reads checkpoint format versions 1 and {}, got {}",
                                    kManifestVersion, version));
  }
  auto count = [&map](std::string_view key) {
    const int64_t value = map.Int(key);
    if (value < 0) map.Fail(key, fmt::format("must not be negative, got {}", value));
    return value;
  };
  CheckpointManifest m;
  if (version >= 2) {
    m.state.run_id = map.String("run");
    if (!IsRunId(m.state.run_id)) {
      map.Fail("run", fmt::format("expected a run id (32 lowercase hex digits), got \"{}\"",
                                  m.state.run_id));
    }
  }
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
  // A save by another run into the same step folder, interrupted: its files beside this
  // manifest's would pass every other check when the runs share the layout and seed.
  if (f.state.run_id != manifest.state.run_id) {
    throw LoadError(
        file,
        fmt::format("written by {}, the manifest {}: two runs saved into this folder",
                    RunName(f.state.run_id),
                    manifest.state.run_id.empty()
                        ? std::string("is of checkpoint format version 1 (no run id)")
                        : "is run " + manifest.state.run_id + "'s"),
        "another run's save into this step folder was interrupted; load a step folder one run "
        "saved whole");
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
