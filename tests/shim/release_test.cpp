// Memory given back when the program asks, the way CUDA programs ask
// (src/shim/serve/release.hpp): programs under the shim on the simulated device check the
// device memory held after synchronizations, cudaMemPoolTrimTo, the default pool's
// attributes and gpumem_shim_trim (programs/release_app.cpp, drv_app.c).

#include "shim_process.hpp"

#include <gtest/gtest.h>

#include <string>

namespace gpumem::test {
namespace {

process_result run_release(std::vector<std::string> args, std::map<std::string, std::string> env = {},
                           bool shim = true) {
  if (shim) env.emplace("LD_PRELOAD", shim_path());
  env.emplace("GPUMEM_SIM_STRICT", "1");
  // The auto rule over the last interval alone, unless a test says otherwise: the
  // scenarios count synchronizations, not seconds (sync-window checks the window).
  env.emplace("GPUMEM_RELEASE_THRESHOLD", "auto:0");
  args.insert(args.begin(), program("shim_release_app"));
  return run_process(args, env);
}

void expect_pass(process_result const& r, std::string const& scenario) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS " + scenario), std::string::npos) << r.output;
}

void expect_fail(process_result const& r) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("CHECK FAILED"), std::string::npos) << r.output;
}

// The auto rule through each kind of synchronization: kept at the first (the
// interval needed it), given back at the second, and a loop that needs the same
// memory every step maps it once.
class ShimReleaseAtSync : public ::testing::TestWithParam<std::string> {};

TEST_P(ShimReleaseAtSync, AutoKeepsWhatTheIntervalNeededAndGivesBackTheRest) {
  expect_pass(run_release({"sync-auto", GetParam()}), "sync-auto");
}

INSTANTIATE_TEST_SUITE_P(Kinds, ShimReleaseAtSync,
                         ::testing::Values("device", "stream", "stream-ptsz", "event", "driver"));

TEST(ShimRelease, TheSyncScenarioFailsWhenSynchronizationsGiveNothingBack) {
  // The same program with the release at synchronizations switched off: what it
  // checks is the feature, not the pool's own behaviour.
  expect_fail(run_release({"sync-auto", "device"}, {{"GPUMEM_RELEASE_THRESHOLD", "unlimited"}}));
}

TEST(ShimRelease, AutoKeepsWhatItsWindowNeededThenGivesItBack) {
  expect_pass(run_release({"sync-window"}, {{"GPUMEM_RELEASE_THRESHOLD", "auto:1"}}), "sync-window");
}

TEST(ShimRelease, ANumericThresholdKeepsThatMuch) {
  expect_pass(run_release({"sync-threshold", "16MiB"}, {{"GPUMEM_RELEASE_THRESHOLD", "16MiB"}}), "sync-threshold");
}

TEST(ShimRelease, UnlimitedNeverGivesBackAtSynchronizations) {
  expect_pass(run_release({"sync-threshold", "unlimited"}, {{"GPUMEM_RELEASE_THRESHOLD", "unlimited"}}),
              "sync-threshold");
}

TEST(ShimRelease, TheProgramsReleaseThresholdOnTheDefaultPoolApplies) {
  expect_pass(run_release({"sync-threshold", "program-16MiB"}), "sync-threshold");
  // UINT64_MAX, as frameworks set it: never, whatever the configuration says.
  expect_pass(run_release({"sync-threshold", "program-unlimited"}, {{"GPUMEM_RELEASE_THRESHOLD", "0"}}),
              "sync-threshold");
}

TEST(ShimRelease, TrimToOnTheDefaultPoolTrimsGpumemsPool) {
  expect_pass(run_release({"trim-to", "runtime"}), "trim-to");
  expect_pass(run_release({"trim-to", "driver"}), "trim-to");
}

TEST(ShimRelease, GpumemShimTrimGivesBackWhatIsCached) { expect_pass(run_release({"shim-trim"}), "shim-trim"); }

// A region with released pages goes back whole: the device memory count must not
// subtract its released pages a second time.
TEST(ShimRelease, TheDeviceMemoryCountStaysRightAfterAPartialAndAWholeTrim) {
  expect_pass(run_release({"shim-trim", "accounting"}), "shim-trim");
}

TEST(ShimRelease, DefaultPoolAttributesReportGpumemsPoolAndTheirHighsReset) {
  expect_pass(run_release({"attributes"}), "attributes");
}

TEST(ShimRelease, NothingGoesBackDuringACaptureAndTheCaptureStaysValid) {
  expect_pass(run_release({"capture"}), "capture");
}

TEST(ShimRelease, DriverLevelSynchronizationsAndPoolCallsThroughDlsymAndTheResolver) {
  auto const r = run_process(
      {program("shim_drv_app"), "release"},
      {{"LD_PRELOAD", shim_path()}, {"GPUMEM_SIM_STRICT", "1"}, {"GPUMEM_RELEASE_THRESHOLD", "auto:0"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS release"), std::string::npos) << r.output;
}

TEST(ShimRelease, SynchronizationsAnswerAsCudaAnswersWithoutTheShim) {
  auto const with = run_release({"sync-errors"});
  auto const without = run_release({"sync-errors"}, {}, false);
  expect_pass(with, "sync-errors");
  expect_pass(without, "sync-errors");
  auto const codes = [](std::string const& out) {
    auto const at = out.find("CODES ");
    return at == std::string::npos ? std::string{"(none)"} : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_EQ(codes(with.output), codes(without.output)) << with.output << without.output;
  EXPECT_NE(codes(with.output), "(none)");
}

}  // namespace
}  // namespace gpumem::test
