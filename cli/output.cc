#include "cli/output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ptdp::cli {
namespace fs = std::filesystem;
namespace {

InputError OutputError(std::string_view flag, const std::string& path, const std::string& why) {
  return InputError({"", 0, std::string(flag)}, fmt::format("cannot write {}: {}", path, why));
}

// The file a path names: a symbolic link's target (followed to the end), else the path itself.
fs::path Target(const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(path, ec)) {
    const fs::path target = fs::weakly_canonical(path, ec);
    if (!ec) return target;
  }
  return fs::path(path);
}

// The folder a file would be created in ("." for a bare name).
fs::path FolderOf(const fs::path& file) {
  const fs::path parent = file.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

void CheckFolder(const fs::path& folder, std::string_view flag, const std::string& path) {
  std::error_code ec;
  if (!fs::exists(folder, ec)) {
    throw OutputError(flag, path, fmt::format("no such folder: {}", folder.string()));
  }
  if (!fs::is_directory(folder, ec)) {
    throw OutputError(flag, path, fmt::format("{} is not a folder", folder.string()));
  }
  // A file created and removed at once: permissions, a read-only file system, quotas and
  // access-control lists answer as they will for the real file (access(2) would say yes to root).
  std::string probe = (folder / ".ptdp-write-check.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw OutputError(
        flag, path,
        fmt::format("the folder {} is not writable ({})", folder.string(), std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// SetStandardOutput's, per thread: commands run at once on several threads from Python.
thread_local std::ostream* standard_output = nullptr;

bool IsOutputFlag(std::string_view flag) {
  return std::find(std::begin(kOutputFileFlags), std::end(kOutputFileFlags), flag) !=
         std::end(kOutputFileFlags);
}

}  // namespace

void SetStandardOutput(std::ostream* out) { standard_output = out; }

bool AnOutputIsStandardOutput(const Flags& flags) {
  for (const auto& [flag, path] : flags.StringValues()) {
    if (path == "-" && IsOutputFlag(flag)) return true;
  }
  return false;
}

void CheckOutputPath(const std::string& path, std::string_view flag) {
  if (path == "-") return;  // standard output
  if (path.empty()) throw OutputError(flag, "\"\"", "the path is empty");
  const fs::path target = Target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec)) throw OutputError(flag, path, "it is a folder");
  CheckFolder(FolderOf(target), flag, path);
  if (fs::exists(target, ec) && ::access(target.c_str(), W_OK) != 0) {
    throw OutputError(flag, path,
                      fmt::format("the file is not writable ({})", std::strerror(errno)));
  }
}

void CheckOutputs(const Flags& flags) {
  const std::vector<std::pair<std::string, std::string>> values = flags.StringValues();
  std::vector<std::pair<std::string, fs::path>> outputs;  // flag, file
  std::string stdin_flag, stdout_flag;
  for (const auto& [flag, path] : values) {
    const std::string dashed = "--" + flag;
    if (path == "-") {
      // One stream each way: two flags cannot both read standard input, nor both write it out.
      std::string& taken = IsOutputFlag(flag) ? stdout_flag : stdin_flag;
      if (!taken.empty()) {
        throw InputError({"", 0, dashed}, fmt::format("{} already uses standard {} (-)", taken,
                                                      IsOutputFlag(flag) ? "output" : "input"));
      }
      taken = dashed;
      continue;
    }
    if (!IsOutputFlag(flag)) continue;
    CheckOutputPath(path, dashed);
    const fs::path target = fs::weakly_canonical(Target(path));
    for (const auto& [other_flag, other] : outputs) {
      if (other == target) {
        throw OutputError(dashed, path, fmt::format("{} writes the same file", other_flag));
      }
    }
    // An output must not replace a file the run reads (--trace plan.yaml with --plan plan.yaml).
    for (const auto& [input_flag, input] : values) {
      std::error_code ec;
      if (IsOutputFlag(input_flag) || input_flag == kOutputDirFlag) continue;
      if (fs::exists(input, ec) && fs::exists(target, ec) && fs::equivalent(input, target, ec)) {
        throw OutputError(
            dashed, path,
            fmt::format("it is the file given to --{}, which this run reads", input_flag));
      }
    }
    outputs.emplace_back(dashed, target);
  }
  if (const auto save = flags.OptionalString(std::string(kOutputDirFlag))) {
    // The folder, or the nearest folder above it that exists, must be writable.
    const std::string dashed = "--" + std::string(kOutputDirFlag);
    if (save->empty()) throw OutputError(dashed, "\"\"", "the path is empty");
    std::error_code ec;
    fs::path folder = fs::absolute(*save, ec);
    if (fs::exists(folder, ec) && !fs::is_directory(folder, ec)) {
      throw OutputError(dashed, *save, "it is a file, not a folder");
    }
    while (!fs::exists(folder, ec) && folder.has_parent_path() && folder != folder.parent_path()) {
      folder = folder.parent_path();
    }
    CheckFolder(folder, dashed, *save);
  }
}

void WriteOutputFiles(const std::vector<OutputFile>& all) {
  std::vector<OutputFile> files;
  const OutputFile* to_stdout = nullptr;
  for (const OutputFile& f : all) {
    if (f.path == "-") {
      to_stdout = &f;
    } else {
      files.push_back(f);
    }
  }
  std::vector<std::string> temporaries;
  try {
    for (const OutputFile& f : files) {
      CheckOutputPath(f.path, f.flag);
      try {
        temporaries.push_back(WriteTemporaryBeside(Target(f.path).string(), f.content, false));
      } catch (const std::system_error& e) {
        throw OutputError(f.flag, f.path, e.code().message());
      }
    }
  } catch (...) {
    for (const std::string& tmp : temporaries) ::unlink(tmp.c_str());
    throw;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (std::rename(temporaries[i].c_str(), Target(files[i].path).c_str()) != 0) {
      const std::string why = std::strerror(errno);
      for (size_t j = i; j < files.size(); ++j) ::unlink(temporaries[j].c_str());
      throw OutputError(files[i].flag, files[i].path, why);
    }
  }
  if (to_stdout != nullptr) {
    std::ostream& out = standard_output != nullptr ? *standard_output : std::cout;
    out << to_stdout->content;
    out.flush();
  }
}

void WriteOutputFile(const std::string& path, std::string_view content, std::string_view flag) {
  WriteOutputFiles({{path, std::string(content), std::string(flag)}});
}

}  // namespace ptdp::cli
