// A PostgreSQL store read through its local mirror (store/mirrored_store.h): records read from the server are
// kept on disk; when the server cannot be reached (its socket gone, the connection cut) lookups and a restart are
// served from the mirror and counted; writes are refused, not lost; once the server answers again it serves; a
// key the server stopped serving leaves the mirror. The server's outage is made by a socket folder that is a
// link to the test server's (removed and restored) and by ending the store's server connections.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <thread>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;

class MirroredStore : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base = store_test::postgres_conninfo();
    if (base.empty()) {
      if (std::getenv("CI"))
        FAIL() << "KILN_TEST_POSTGRES is not set: CI runs these against scripts/postgres.sh's server";
      GTEST_SKIP() << "no PostgreSQL server: set KILN_TEST_POSTGRES";
    }
    std::smatch m;
    const std::string socket_dir = std::regex_search(base, m, std::regex(R"(host=(\S+))")) ? m[1].str() : "";
    if (socket_dir.empty() || socket_dir[0] != '/') GTEST_SKIP() << "the test server is not on a unix socket";
    link_ = dir_.file("sock");
    std::filesystem::create_directory_symlink(socket_dir, link_);
    where_ = dir_.file("server");
    ASSERT_GE(store_test::postgres_sql(where_, ""), 0);  // its schema
    app_ = "kiln_mirror_" + std::to_string(std::hash<std::string>{}(where_));
    location_ = store_test::postgres_location(where_) + " host=" + link_ + " application_name=" + app_;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove(link_, ec);
    if (!store_test::postgres_schemas_made().empty()) {
      auto conn = store::PgConn::connect(store_test::postgres_conninfo(), "test server", false);
      for (const std::string& s : store_test::postgres_schemas_made())
        if (conn.is_ok()) (void)(*conn)->exec(("DROP SCHEMA IF EXISTS " + s + " CASCADE").c_str());
      store_test::postgres_schemas_made().clear();
    }
  }
  std::unique_ptr<PlanStore> open_mirrored() {
    StoreOpenOptions o;
    o.mirror_path = dir_.file("mirror.db");
    o.mirror_retry_s = 0.2;
    auto s = PlanStore::open(location_, o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    return s.is_ok() ? std::move(s).value() : nullptr;
  }
  // The server goes away: its socket folder is gone and the store's connections are ended.
  void cut() {
    std::filesystem::remove(link_);
    ASSERT_GE(
        store_test::postgres_sql(
            where_, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '" + app_ + "'"),
        0);
  }
  TempDir dir_;
  std::string link_, where_, app_, location_;
};

TEST_F(MirroredStore, AnUnreachableServerIsServedFromTheMirrorAndWritesAreRefusedNotLost) {
  const std::string socket_dir = std::filesystem::read_symlink(link_).string();
  auto s = open_mirrored();
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->put(make_record(i)).is_ok());
  const PlanRecord r0 = make_record(0);
  ASSERT_EQ(s->get(r0.structure_sig, r0.shape_key, h200())->outcome, LookupOutcome::kHit);
  EXPECT_EQ(s->counters().mirror_hits, 0);

  cut();
  auto got = s->get(r0.structure_sig, r0.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->outcome, LookupOutcome::kHit) << "served from the mirror";
  EXPECT_EQ(got->record->plan_bytes, r0.plan_bytes);
  StoreCounters c = s->counters();
  EXPECT_EQ(c.mirror_hits, 1);
  EXPECT_GE(c.unreachable, 1);
  EXPECT_FALSE(c.unreachable_error.empty());
  StatusOr<PlanRecord> put = s->put(make_record(7));
  EXPECT_EQ(put.status().code(), StatusCode::kUnavailable) << put.status().to_string();
  EXPECT_NE(put.status().message().find("cannot be reached"), std::string::npos) << put.status().message();
  EXPECT_EQ(s->claim_retune(fingerprint_key(h200()), {}).status().code(), StatusCode::kUnavailable);

  // A restart while the server is away: the store opens, and starts from its mirror.
  s.reset();
  auto again = open_mirrored();
  ASSERT_NE(again, nullptr);
  auto all = again->load_all(h200());
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_EQ(all->records.size(), 3u);
  EXPECT_EQ(again->counters().mirror_hits, 3);

  // The server is back: it serves again (and what was refused was never half-written).
  std::filesystem::create_directory_symlink(socket_dir, link_);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto back = again->get(r0.structure_sig, r0.shape_key, h200());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->outcome, LookupOutcome::kHit);
  EXPECT_TRUE(again->counters().unreachable_error.empty()) << again->counters().unreachable_error;
  auto seven = again->get(make_record(7).structure_sig, make_record(7).shape_key, h200());
  ASSERT_TRUE(seven.is_ok());
  EXPECT_EQ(seven->outcome, LookupOutcome::kMiss) << "the refused write is not in the server";
}

TEST_F(MirroredStore, AKeyTheServerStoppedServingLeavesTheMirror) {
  const std::string socket_dir = std::filesystem::read_symlink(link_).string();
  auto s = open_mirrored();
  ASSERT_NE(s, nullptr);
  const PlanRecord r = make_record(1);
  ASSERT_TRUE(s->put(r).is_ok());
  ASSERT_EQ(s->get(r.structure_sig, r.shape_key, h200())->outcome, LookupOutcome::kHit);
  {  // removed from the fleet's store by someone else (kiln plans rm on another host)
    auto direct = PlanStore::open(store_test::postgres_location(where_));
    ASSERT_TRUE(direct.is_ok()) << direct.status().to_string();
    ListFilter f;
    f.structure_prefix = r.structure_sig;
    ASSERT_EQ(*(*direct)->remove(f), 1);
  }
  EXPECT_EQ(s->get(r.structure_sig, r.shape_key, h200())->outcome, LookupOutcome::kMiss);
  cut();
  auto got = s->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->outcome, LookupOutcome::kMiss) << "the mirror never serves what the fleet removed";
  std::filesystem::create_directory_symlink(socket_dir, link_);
}

TEST_F(MirroredStore, AServerUnreachableAtTheFirstStartIsAnEmptyMirrorNotAnError) {
  std::filesystem::remove(link_);
  auto s = open_mirrored();
  ASSERT_NE(s, nullptr);
  auto got = s->get("sig", "", h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->outcome, LookupOutcome::kMiss);
  EXPECT_FALSE(s->counters().unreachable_error.empty());
}

}  // namespace
}  // namespace kiln
