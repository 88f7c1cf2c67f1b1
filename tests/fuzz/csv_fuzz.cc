// Fuzz target: the measured-data readers. Every input is read as a vTrain CSV, as a
// Megatron-Bridge pretraining CSV (validation/) and as the calibration job's figures
// (executor/calibrate/calibrate.h). Anything but rows or an InputError naming source:line and the
// column (another exception, a crash, a sanitizer report, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "executor/calibrate/calibrate.h"
#include "validation/bridge.h"
#include "validation/vtrain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const ptdp::VtrainRow& row : ptdp::ParseVtrainCsv(text, "vtrain.csv")) {
      if (row.tp * row.dp * row.pp < 1 || !(row.measured_s > 0)) __builtin_trap();
    }
  } catch (const ptdp::InputError&) {
  }
  try {
    (void)ptdp::ParseBridgeCsv(text, "h100_pretrain.csv");
  } catch (const ptdp::InputError&) {
  }
  try {
    (void)ptdp::ParseCommFigures(text, "comm.txt");
  } catch (const ptdp::InputError&) {
  }
  return 0;
}
