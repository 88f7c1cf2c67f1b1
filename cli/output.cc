#include "cli/output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace ptdp::cli {

void WriteOutputFile(const std::string& path, std::string_view content, std::string_view flag) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  auto fail = [&](const std::string& why) {
    std::remove(tmp.c_str());
    throw InputError({"", 0, std::string(flag)}, fmt::format("cannot write {}: {}", path, why));
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("it is a directory");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) fail(std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(std::strerror(errno));
}

}  // namespace ptdp::cli
