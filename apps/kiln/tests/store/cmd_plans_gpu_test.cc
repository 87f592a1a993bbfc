// `kiln plans` as a user runs it where a GPU is present: the half of the CLI checks that needs one (the host
// tier hides the GPU from kiln; store.PlansCli covers the rest).
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.h"
#include "gpu_test_util.h"
#include "kiln/core/exit_codes.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::make_record;
using store_test::TempDir;
using test::CliResult;
using test::run_kiln;

// --deep runs the plans on this GPU; these fake records have no graph and are reported as not deep-checked.
TEST(PlansCliWithAGpu, DeepVerifyOfRecordsWithoutAGraphSaysNotDeepChecked) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  const std::string store = dir.file("plans.db");
  {
    StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(store);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->put(make_record(i)).is_ok());
  }
  CliResult r = run_kiln("plans verify --deep --store " + store);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("not deep-checked"), std::string::npos) << r.output();
}

}  // namespace
}  // namespace kiln
