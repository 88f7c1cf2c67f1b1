// Writing output files from the CLI: atomically (a temporary name in the same directory, then a
// rename), so an interrupted or failed write never leaves a half-written file or destroys the
// previous one.
#pragma once

#include <string>
#include <string_view>

namespace ptdp::cli {

// Writes `content` to `path`; an unwritable path is an InputError naming `flag` and the path.
void WriteOutputFile(const std::string& path, std::string_view content, std::string_view flag);

}  // namespace ptdp::cli
