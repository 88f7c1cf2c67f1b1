#include "core/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ptdp {
namespace {

// The permissions open(2) gives a new file: 0666 less the umask (mkstemp's are 0600).
mode_t NewFileMode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

std::string WriteTemporaryBeside(const std::string& target, std::string_view content, bool sync,
                                 const std::function<void()>& on_half) {
  std::string tmp = fmt::format("{}.tmp.{}.XXXXXX", target, ::getpid());
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + tmp);
  auto fail = [&](const char* what) {
    const int error = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::system_error(error, std::generic_category(), what);
  };
  struct stat old {};
  const mode_t mode = ::stat(target.c_str(), &old) == 0 ? (old.st_mode & 07777) : NewFileMode();
  if (::fchmod(fd, mode) != 0) fail("cannot set the permissions");
  auto write_range = [&](size_t from, size_t to) {
    while (from < to) {
      const ssize_t n = ::write(fd, content.data() + from, to - from);
      if (n <= 0) fail("write failed");
      from += static_cast<size_t>(n);
    }
  };
  write_range(0, content.size() / 2);
  if (on_half) on_half();
  write_range(content.size() / 2, content.size());
  if (sync && ::fsync(fd) != 0) fail("cannot flush to disk");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    throw std::system_error(error, std::generic_category(), "write failed at close");
  }
  return tmp;
}

}  // namespace ptdp
