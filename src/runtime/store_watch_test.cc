// A Planner over a server store acts on the store's change notices (PlanBackend::changed_plans): what it holds of
// a structure another process stored a plan for is dropped, so that the next obtain() reads the store again and
// serves the new plan; a "*" notice (notices may have been missed) drops everything; notices of nothing held
// change nothing; stats() counts them. With a FakeBackend: no GPU, no server.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes

struct WatchFixture {
  NoticeBackend* backend = nullptr;
  std::unique_ptr<Planner> planner;
  explicit WatchFixture(const std::string& store = "postgresql://kiln@db/plans") {
    auto b = std::make_unique<NoticeBackend>();
    backend = b.get();
    PlannerOptions o;
    o.store_path = store;
    o.store_watch_s = 0.02;
    o.new_shapes = NewShapes::kBuildNow;
    planner = Planner::create_with_backend(std::move(b), o);
  }
  // Waits until the watcher has asked the store at least `n` more times.
  void wait_polls(int n) {
    const int until = backend->polls.load() + n;
    for (int i = 0; i < 500 && backend->polls.load() < until; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
};

TEST(StoreWatch, APlanStoredElsewhereIsReadAgainAtTheNextObtain) {
  WatchFixture f;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  f.backend->stored.insert("tokens=64");
  auto a = f.planner->obtain(*pg);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kStore);
  EXPECT_EQ(f.planner->obtain(*pg)->source, PlanSource::kMemory);
  const int reads = f.backend->store_calls.load();

  // Another structure's notice changes nothing held here.
  f.backend->notice({"0123456789abcdef", "tokens=64", "fp"});
  f.wait_polls(2);
  EXPECT_EQ(f.planner->obtain(*pg)->source, PlanSource::kMemory);

  // This structure's: the next obtain reads the store again.
  f.backend->notice({pg->signature.structure, "tokens=64", "fp"});
  f.wait_polls(2);
  auto b = f.planner->obtain(*pg);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kStore);
  EXPECT_GT(f.backend->store_calls.load(), reads);
  EXPECT_NE(b->plan.get(), a->plan.get()) << "the plan was swapped for the one read again";
  EXPECT_EQ(f.planner->stats().store_notices, 2);
  EXPECT_NE(f.planner->stats().text().find("2 plans stored elsewhere swapped in"), std::string::npos)
      << f.planner->stats().text();
}

TEST(StoreWatch, NoticesThatMayHaveBeenMissedDropEverythingHeld) {
  WatchFixture f;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored.insert("tokens=64");
  ASSERT_TRUE(f.planner->obtain(*pg).is_ok());
  EXPECT_EQ(f.planner->stats().cached, 1);
  f.backend->notice({"*", "", ""});
  f.wait_polls(2);
  EXPECT_EQ(f.planner->stats().cached, 0);
  EXPECT_EQ(f.planner->obtain(*pg)->source, PlanSource::kStore);
}

TEST(StoreWatch, AFileStoreIsWatchedTooAndNoStoreIsNot) {
  WatchFixture file("/var/cache/kiln/plans.db");  // SQLite: its history rows are its notices
  file.wait_polls(2);
  EXPECT_GE(file.backend->polls.load(), 2);
  WatchFixture none("");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(none.backend->polls.load(), 0);
}

}  // namespace
}  // namespace kiln
