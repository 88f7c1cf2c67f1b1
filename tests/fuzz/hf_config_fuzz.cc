// Fuzz target: Hugging Face config.json import (core/hf_config.h). A config that reads must give
// a model whose sizes are positive and whose parameter count is finite; anything but a result or
// an InputError naming the key (another exception, a crash, a sanitizer report, a hang) is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/hf_config.h"
#include "core/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ptdp::ModelSpec m = ptdp::ParseHfConfig(text, "config.json");
    if (m.num_layers < 1 || m.hidden_size < 1 || m.num_attention_heads < 1 || m.vocab_size < 1) {
      __builtin_trap();
    }
    if (ptdp::CountParameters(m).total <= 0) __builtin_trap();
  } catch (const ptdp::InputError&) {
    // Bad input, said with its source and key.
  }
  return 0;
}
