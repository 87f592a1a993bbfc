// PlannerStats::text(): what `kiln replay` and a service's logs say of a Planner, the store's mirror included.
#include <gtest/gtest.h>

#include "kiln/runtime/planner_stats.h"

namespace kiln {
namespace {

TEST(PlannerStats, ASilentStoreAddsNothing) {
  PlannerStats st;
  EXPECT_EQ(st.text().find("store:"), std::string::npos) << st.text();
}

TEST(PlannerStats, AnUnreachableServerAndItsMirrorAreSaid) {
  PlannerStats st;
  st.store_mirror_hits = 12;
  st.store_unreachable = "cannot reach PostgreSQL store host=db dbname=kiln: connection refused";
  EXPECT_NE(st.text().find("; store: 12 served from its local mirror (the server is unreachable: cannot reach "
                           "PostgreSQL store host=db dbname=kiln: connection refused)"),
            std::string::npos)
      << st.text();
  st.store_unreachable.clear();
  EXPECT_NE(st.text().find("; store: 12 served from its local mirror (the server answers again)"), std::string::npos)
      << st.text();
}

}  // namespace
}  // namespace kiln
