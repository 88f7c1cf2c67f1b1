// Fuzz target: ptdp's YAML files (core/spec_yaml.h). Every input is read as a model file, as a
// cluster (hardware profile) file and as a plan file, since the three share the YAML reader and a
// plan holds the other two. A plan that reads and passes Megatron's rules is simulated, as
// `ptdp simulate --plan` does, and must give finite, non-negative figures. The only way out other
// than a result is an InputError naming the source; anything else (another exception, a crash, a
// sanitizer report, a hang) is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/spec_yaml.h"
#include "megatron/plan_file.h"
#include "megatron/rules.h"
#include "simulator/simulate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)ptdp::ParseModelYaml(text, "model.yaml");
  } catch (const ptdp::InputError&) {
  }
  try {
    (void)ptdp::ParseClusterYaml(text, "cluster.yaml");
  } catch (const ptdp::InputError&) {
  }
  try {
    const ptdp::Plan plan = ptdp::ParsePlanYaml(text, "plan.yaml");
    if (!ptdp::CheckParallelConfig(plan.model, plan.training, plan.parallel,
                                   plan.parallel.world_size(), plan.options)
             .empty()) {
      return 0;
    }
    const ptdp::SimulationReport r = ptdp::SimulatePlan(plan);
    if (!std::isfinite(r.sim.step_time_s) || r.sim.step_time_s < 0) __builtin_trap();
  } catch (const ptdp::InputError&) {
    // Bad input, said with its source, line and key.
  }
  return 0;
}
