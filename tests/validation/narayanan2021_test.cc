// Public validation: Narayanan et al. 2021, Table 1 (shared/reference/narayanan2021-table1.yaml)
// simulated on the dgx-a100-80gb profile; and the provenance of that profile's two calibrated
// constants (Korthikanti et al. 2022's measured runs). Prints the table that
// results/validation/narayanan2021-table1.md records.
#include "validation/narayanan2021.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "core/presets.h"

namespace ptdp {
namespace {

TEST(Narayanan2021, EveryRowWithinTenPercentAndMeanWithinFive) {
  const std::vector<ValidationResult> results =
      ValidateNarayanan2021(ClusterPreset("dgx-a100-80gb"));
  std::cout << ValidationMarkdown(results);
  ASSERT_EQ(results.size(), 10u);
  for (const ValidationResult& r : results) {
    EXPECT_LE(std::abs(r.error()), 0.10) << r.row.params_billion << "B";
    // The closed form and the event simulation tell the same story on these layouts.
    EXPECT_NEAR(r.closed_form_s / r.simulated_s, 1.0, 0.01) << r.row.params_billion << "B";
  }
  EXPECT_LE(MeanAbsoluteError(results), 0.05);
}

TEST(Narayanan2021, PublishedTimesAreTheReferenceFilesDerivedTimes) {
  // shared/reference/narayanan2021-table1.yaml: "Derived iteration times (seconds)".
  const double derived[] = {3.53, 3.70, 3.70, 9.40, 14.45, 16.06, 24.82, 37.61, 54.08, 102.63};
  const auto rows = NarayananTable1();
  ASSERT_EQ(rows.size(), 10u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(PublishedStepTime(rows[i]), derived[i], 0.006) << rows[i].params_billion << "B";
  }
  // Layouts: 76.1B runs 15 layers per stage in chunks of 5, so 3 virtual stages.
  EXPECT_EQ(NarayananLayout(rows[5]).virtual_stages, 3);
  EXPECT_EQ(NarayananLayout(rows[5]).schedule, Schedule::kInterleaved);
  EXPECT_EQ(NarayananLayout(rows[9]).schedule, Schedule::k1F1B);
  EXPECT_EQ(NarayananLayout(rows[9]).dp, 6);
}

TEST(Calibration, TheA100ProfileIsTheFitToKorthikanti2022) {
  const ClusterSpec a100 = ClusterPreset("dgx-a100-80gb");
  const Calibration fit = CalibrateOnKorthikanti2022(a100);
  // The profile already holds the fitted levels: scaling its table again changes nothing.
  EXPECT_NEAR(fit.gemm_scale, 1.0, 0.0101);
  EXPECT_NEAR(fit.memory_efficiency, a100.gpu.memory_efficiency, 0.0101);
  EXPECT_LE(fit.mean_abs_error, 0.05);
  for (const KorthikantiRow& row : Korthikanti2022Table()) {
    const double simulated = SimulateKorthikanti(a100, row);
    std::cout << row.name << (row.selective_sp ? " selective+sp" : " full") << ": measured "
              << row.step_s << " s, simulated " << simulated << " s\n";
    EXPECT_NEAR(simulated / row.step_s, 1.0, 0.06) << row.name;
  }
}

}  // namespace
}  // namespace ptdp
