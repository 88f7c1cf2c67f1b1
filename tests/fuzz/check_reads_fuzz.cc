// Fuzz target: what `ptdp check` reads (README "What check reads"). The input is a launch script,
// written into a folder beside another that holds a secret file (a marker made at random when the
// target starts, so no input can hold it); `check --file` runs on it, as text and as JSON, and no
// output may contain the marker: the script may source, `.`, sbatch, eval or expand whatever it
// likes (../outside/..., absolute paths, a symbolic link in its own folder pointing out, /proc),
// files outside its folder are never read. Anything else that ends the command than an exit code
// (a crash, a sanitizer report, a hang) is a finding too. Built with libFuzzer under
// -DPTDP_FUZZ=ON (clang); replayed over its corpus by every test run (replay_main.cc).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace {

namespace fs = std::filesystem;

struct Folders {
  fs::path script;  // the script's folder: <base>/run/train.sh
  std::string marker;
};

// <base>/outside/{secret.txt, env.sh} hold the marker; <base>/run/ has an allowed file and a
// symbolic link that points out. Made once per process, removed at exit.
const Folders& Setup() {
  static const Folders folders = [] {
    std::random_device random;
    std::string marker = "M";
    for (int i = 0; i < 4; ++i) marker += std::to_string(random());
    const fs::path base =
        fs::temp_directory_path() / ("ptdp-check-reads-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(base / "outside");
    fs::create_directories(base / "run" / "sub");
    std::ofstream(base / "outside" / "secret.txt") << marker << "\n";
    std::ofstream(base / "outside" / "env.sh")
        << "export NUM_LAYERS=" << marker << "\nexport SECRET=" << marker << "\n--num-layers "
        << marker << "\n";
    std::ofstream(base / "run" / "inside.sh") << "export HIDDEN=1024\n";
    std::ofstream(base / "run" / "sub" / "job.sh") << "#!/bin/bash\npython pretrain_gpt.py\n";
    std::error_code ec;
    fs::create_symlink(base / "outside" / "env.sh", base / "run" / "link.sh", ec);
    fs::create_symlink(base / "outside", base / "run" / "out", ec);
    static const fs::path removed = base;
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(removed, ignored);
    });
    return Folders{base / "run", marker};
  }();
  return folders;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Folders& f = Setup();
  const fs::path script = f.script / "train.sh";
  std::ofstream(script, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  for (const char* format : {"table", "json"}) {
    std::ostringstream out, err;
    ptdp::cli::Run({"check", "--file", script.string(), "--format", format, "--gpus", "8"}, out,
                   err);
    if (out.str().find(f.marker) != std::string::npos ||
        err.str().find(f.marker) != std::string::npos) {
      __builtin_trap();  // a byte of a file outside the script's folder reached the output
    }
  }
  return 0;
}
