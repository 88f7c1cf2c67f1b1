// Fuzz target: `ptdp check`'s reader, from text to rules. A pasted command or launch script is
// played by the shell interpreter (megatron/shell.h), read as Megatron-LM's argparse reads it
// (megatron/read_command.h), its world size resolved and its layout checked against Megatron's
// rules (megatron/rules.h). Whatever the text, the only way out other than a result is an
// InputError naming the source; anything else (another exception, a crash, a sanitizer report,
// a hang) is a finding. Built with libFuzzer under -DPTDP_FUZZ=ON (clang); replayed over its
// corpus by every test run (replay_main.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/limits.h"
#include "megatron/read_command.h"
#include "megatron/rules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ptdp::MegatronReadOptions options;
  options.script_args = {"/data/path", "8"};
  options.environment = {{"PWD", "/work"}};
  // `source FILE` reads the second half of the input, so the fuzzer reaches nested scripts.
  options.read_file = [text](const std::string&) -> std::optional<std::string> {
    return text.substr(text.size() / 2);
  };
  try {
    ptdp::MegatronCommand c = ptdp::ReadMegatronCommand(text, "fuzz.sh", options);
    const ptdp::ParallelConfig& p = c.parallel;
    if (p.tp < 1 || p.pp < 1 || p.cp < 1 || p.ep < 1 || p.micro_batch_size < 1) __builtin_trap();
    const int64_t gpus = std::clamp<int64_t>(c.world_size.value_or(8), 1, ptdp::kMaxGpus);
    ptdp::ResolveWorldSize(c, gpus);
    if (c.model_complete && c.training.global_batch_size > 0) {
      (void)ptdp::CheckParallelConfig(c.model, c.training, c.parallel, gpus, c.options);
    }
  } catch (const ptdp::InputError&) {
    // Bad input, said with its source and line: the expected answer to most random text.
  }
  return 0;
}
