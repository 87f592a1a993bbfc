// PlannerOptions::preload: create() starts loading the listed graphs' stored plans on threads of its own
// (src/runtime/planner.cc); an obtain() of a shape being loaded waits for that load; plans are warm before anyone
// gets them.
#include <condition_variable>
#include <future>

#include "runtime/fake_backend_test_util.h"
#include "runtime/warmed_loads.h"

namespace kiln {
namespace {

using planner_fake::FakeBackend;
using planner_fake::NoticeBackend;

struct Started {
  FakeBackend* backend = nullptr;
  std::unique_ptr<Planner> planner;
};

// A Planner over a FakeBackend prepared by `setup` before create_with_backend starts the loads.
Started start(const std::function<void(FakeBackend&)>& setup, int threads = 4) {
  auto b = std::make_unique<FakeBackend>();
  setup(*b);
  Started s;
  s.backend = b.get();
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  o.preload_threads = threads;
  o.with_preload({token_graph()});
  s.planner = Planner::create_with_backend(std::move(b), o);
  return s;
}

void tuned(FakeBackend& b, std::initializer_list<int64_t> tokens) {
  for (int64_t t : tokens)
    b.tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
}

// A gate a FakeBackend's store loads wait at until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int waiting = 0;
  void pass() {
    std::unique_lock<std::mutex> lock(mu);
    ++waiting;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_for_one() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return waiting > 0; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(PlannerPreload, CreateLoadsAndWarmsEveryStoredShapeOfTheListedGraphs) {
  Started s = start([](FakeBackend& b) {
    b.stored = {"tokens=128", "tokens=256"};
    tuned(b, {128, 256, 512});  // 512: tuned, but its record does not load
  });
  auto rep = s.planner->wait_for_preload();
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->loaded, 2);
  EXPECT_EQ(rep->warmed, 2);
  EXPECT_EQ(rep->failed, 1);
  EXPECT_EQ(rep->last_failure, "tokens=512: miss");
  EXPECT_EQ(s.backend->warmed.load(), 2);
  EXPECT_EQ(s.backend->store_calls.load(), 3);
  auto pg = s.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  for (int64_t t : {128, 256}) {
    auto got = s.planner->obtain(*pg, {{"tokens", t}});
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->source, PlanSource::kMemory) << t;
  }
  EXPECT_EQ(s.backend->store_calls.load(), 3) << "a preloaded shape is never loaded again";
  EXPECT_EQ(s.planner->stats().cached, 2);
}

// A preload that warms each plan tells the backend so while it loads (LoadsWarmedByCaller: the cuDNN backend then loads
// beside the other preload threads, without the Frontend's warmup); one that does not warm, and an obtain, do not.
TEST(PlannerPreload, TheBackendHearsWhichLoadsTheirCallerWarms) {
  for (bool warm : {true, false}) {
    auto b = std::make_unique<FakeBackend>();
    b->stored = {"tokens=128", "tokens=256", "tokens=512"};
    tuned(*b, {128, 256});
    std::atomic<int> beside{0}, alone{0};
    b->store_hook = [&] { ++(runtime_detail::LoadsWarmedByCaller::active() ? beside : alone); };
    FakeBackend* backend = b.get();
    PlannerOptions o;
    o.new_shapes = NewShapes::kBuildNow;
    o.preload_warm = warm;
    o.with_preload({token_graph()}, warm);
    auto planner = Planner::create_with_backend(std::move(b), o);
    auto rep = planner->wait_for_preload();
    ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
    EXPECT_EQ(rep->loaded, 2) << "warm " << warm;
    EXPECT_EQ(beside.load(), warm ? 2 : 0) << "warm " << warm;
    EXPECT_EQ(alone.load(), warm ? 0 : 2) << "warm " << warm;
    auto pg = planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    auto got = planner->obtain(*pg, {{"tokens", 512}});  // not preloaded: the caller's own load
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->source, PlanSource::kStore);
    EXPECT_EQ(beside.load(), warm ? 2 : 0) << "an obtain's load was told its caller warms it";
    EXPECT_EQ(alone.load(), warm ? 1 : 3);
    EXPECT_EQ(backend->warmed.load(), warm ? 2 : 0);
  }
}

// A plan whose warm-up fails was loaded beside others without the Frontend's warmup and has never run: it is loaded
// again the ordinary way (with that warmup) and held, and the report says why.
TEST(PlannerPreload, APlanWhoseWarmUpFailsIsLoadedAgainTheOrdinaryWay) {
  std::atomic<int> beside{0}, alone{0};
  Started s = start([&](FakeBackend& b) {
    b.stored = {"tokens=128"};
    tuned(b, {128});
    b.warm_fails = true;
    b.store_hook = [&] { ++(runtime_detail::LoadsWarmedByCaller::active() ? beside : alone); };
  });
  auto rep = s.planner->wait_for_preload();
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->loaded, 1);
  EXPECT_EQ(rep->warmed, 0);
  EXPECT_EQ(rep->failed, 1);
  EXPECT_EQ(rep->last_failure, "tokens=128: warm-up: out of device memory (injected)");
  EXPECT_EQ(beside.load(), 1) << "the first load, beside others";
  EXPECT_EQ(alone.load(), 1) << "the second, the ordinary way";
  auto pg = s.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto got = s.planner->obtain(*pg, {{"tokens", 128}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kMemory) << "held after the second load";
  EXPECT_EQ(s.backend->store_calls.load(), 2);
}

// The second load after a failed warm-up finds nothing (the record went meanwhile): nothing is held and the report
// names both the warm-up's failure and the second load's miss.
TEST(PlannerPreload, ASecondLoadThatMissesAfterAFailedWarmUpSaysBoth) {
  FakeBackend* backend = nullptr;
  std::atomic<int> loads{0};
  Started s = start([&](FakeBackend& b) {
    backend = &b;
    b.stored = {"tokens=128"};
    tuned(b, {128});
    b.warm_fails = true;
    b.store_hook = [&] {
      if (++loads == 2) {
        std::lock_guard<std::mutex> lock(backend->mu);
        backend->stored.clear();
      }
    };
  });
  auto rep = s.planner->wait_for_preload();
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->loaded, 0);
  EXPECT_EQ(rep->failed, 1);
  EXPECT_EQ(rep->last_failure,
            "tokens=128: warm-up: out of device memory (injected); loaded again the ordinary way: miss (not held)");
  EXPECT_EQ(s.planner->stats().cached, 0);
}

TEST(PlannerPreload, AnObtainDuringTheLoadGetsTheLoadedPlanWarm) {
  Gate gate;
  Started s = start([&](FakeBackend& b) {
    b.stored = {"tokens=128"};
    tuned(b, {128});
    b.store_hook = [&gate] { gate.pass(); };
    b.warm_delay_ms = 100;  // a plan held before its warm-up would reach the caller cold
  });
  gate.wait_for_one();  // the load has started, and waits
  auto pg = s.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto caller = std::async(std::launch::async, [&] {
    auto got = s.planner->obtain(*pg, {{"tokens", 128}});
    const int warmed_then = s.backend->warmed.load();
    return std::make_pair(std::move(got), warmed_then);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the caller is (most likely) waiting by now
  gate.release();
  auto [got, warmed_then] = caller.get();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kMemory) << got->why;
  EXPECT_EQ(warmed_then, 1) << "the caller got the plan before its warm-up";
  EXPECT_EQ(s.backend->store_calls.load(), 1) << "the shape was loaded twice";
  auto rep = s.planner->wait_for_preload();
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(rep->loaded, 1);
}

TEST(PlannerPreload, ALoadThatFindsNothingLetsTheWaitingObtainWalkTheChain) {
  Gate gate;
  Started s = start([&](FakeBackend& b) {
    tuned(b, {128});  // tuned, but the store has no loadable record for it
    b.store_hook = [&gate] { gate.pass(); };
  });
  gate.wait_for_one();
  auto pg = s.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  auto caller = std::async(std::launch::async, [&] { return s.planner->obtain(*pg, {{"tokens", 128}}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gate.release();
  auto got = caller.get();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_NE(got->source, PlanSource::kMemory) << "served the preload's empty hand: " << got->why;
  EXPECT_GE(s.backend->builds.load(), 1);
  auto rep = s.planner->wait_for_preload();
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(rep->loaded, 0);
  EXPECT_EQ(rep->failed, 1);
}

TEST(PlannerPreload, LoadsRunOnSeveralThreadsAndEachShapeOnce) {
  Started s = start(
      [](FakeBackend& b) {
        for (int64_t t = 1; t <= 24; ++t) {
          b.stored.insert("tokens=" + std::to_string(t * 8));
          tuned(b, {t * 8});
        }
        b.warm_delay_ms = 20;
      },
      /*threads=*/6);
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = s.planner->wait_for_preload();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(rep->loaded, 24);
  EXPECT_EQ(rep->warmed, 24);
  EXPECT_EQ(s.backend->store_calls.load(), 24);
  // 24 warm-ups of 20 ms: 480 ms on one thread, about 80 on six. Loose: a loaded machine is slow.
  EXPECT_LT(ms, 400) << "the loads did not run on several threads";
}

TEST(PlannerPreload, APlannerDestroyedWhileLoadingStopsTheLoadsNotYetStarted) {
  std::atomic<int> loads{0};
  Started s = start([&loads](FakeBackend& b) {
    for (int64_t t = 1; t <= 50; ++t) {
      b.stored.insert("tokens=" + std::to_string(t));
      tuned(b, {t});
    }
    b.store_hook = [&loads] { ++loads; };
    b.warm_delay_ms = 50;  // all 50 on 4 threads: about 650 ms
  });
  while (loads.load() == 0) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  s.planner.reset();  // joins the loads in flight; the rest never start
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(loads.load(), 50);
  EXPECT_LT(ms, 400) << "the Planner waited for every load";
}

// A store notice (another host promoted or rolled back the plan) that arrives while a plan is being loaded and warmed
// makes that plan stale: it is not held, and the next obtain() reads the store again.
TEST(PlannerPreload, ANoticeDuringTheLoadLeavesThePlanUnheld) {
  auto b = std::make_unique<NoticeBackend>();
  NoticeBackend* be = b.get();
  be->stored = {"tokens=128"};
  tuned(*be, {128});
  be->warm_delay_ms = 300;
  PlannerOptions o;
  o.store_path = "postgresql://kiln@db/plans";  // a watched store (the fake answers the notices)
  o.store_watch_s = 0.02;
  o.new_shapes = NewShapes::kBuildNow;
  o.with_preload({token_graph()});
  auto p = Planner::create_with_backend(std::move(b), o);
  auto pg = p->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  while (be->store_calls.load() == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // warming up now
  be->notice({pg->signature.structure, "tokens=128", "fp"});
  const int until = be->polls.load() + 3;
  while (be->polls.load() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto rep = p->wait_for_preload();
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(p->stats().store_notices, 1);
  EXPECT_EQ(rep->loaded, 0);
  EXPECT_NE(rep->last_failure.find("the store changed while it loaded"), std::string::npos) << rep->last_failure;
  const int reads = be->store_calls.load();
  auto got = p->obtain(*pg, {{"tokens", 128}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kStore) << "the plan read before the notice was held: " << got->why;
  EXPECT_EQ(be->store_calls.load(), reads + 1);
}

TEST(PlannerPreload, AGraphListedTwiceIsLoadedOnce) {
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* be = b.get();
  be->stored = {"tokens=128"};
  tuned(*be, {128});
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  o.with_preload({token_graph(), token_graph()});
  auto p = Planner::create_with_backend(std::move(b), o);
  auto rep = p->wait_for_preload();
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(rep->loaded, 1);
  EXPECT_EQ(rep->failed, 0) << rep->last_failure;
  EXPECT_EQ(be->store_calls.load(), 1);
}

TEST(PlannerPreload, CreateRefusesBadOptionsBeforeAnyDeviceWork) {
  PlannerOptions o;
  o.preload_threads = 0;
  auto p = Planner::create(o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("preload_threads must be 1..64, got 0"), std::string::npos)
      << p.status().message();

  Graph bad = token_graph();
  bad.name = "broken";
  bad.nodes[0].inputs.push_back(99);  // a tensor that does not exist
  PlannerOptions o2;
  o2.with_preload({bad});
  auto q = Planner::create(o2);
  ASSERT_FALSE(q.is_ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument) << q.status().to_string();
  EXPECT_NE(q.status().message().find("PlannerOptions::preload, graph 'broken'"), std::string::npos)
      << q.status().message();
}

}  // namespace
}  // namespace kiln
