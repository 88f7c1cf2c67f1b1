// Writing a file so that readers see the old content or the new, never a half-written file: the
// content goes to a temporary file beside the target, which is then renamed over it. Shared by
// the CLI's outputs (cli/output.h) and the executor's checkpoints (executor/train/checkpoint.h).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace ptdp {

// Writes `content` to a new file in `target`'s folder, named after it ("TARGET.tmp.PID.XXXXXX"),
// with the permissions of the file it will replace (those open(2) gives a new file when there is
// none), flushed to disk when `sync`, and returns its name; rename it over `target` to commit.
// `on_half` (fault-injection tests) runs when half of the bytes are written. On failure the file
// is removed and std::system_error is thrown with errno's code.
std::string WriteTemporaryBeside(const std::string& target, std::string_view content, bool sync,
                                 const std::function<void()>& on_half = {});

}  // namespace ptdp
