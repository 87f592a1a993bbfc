// The shared test helpers' own tests: tests/cli_test_util.h (running a command and the kiln binary: streams
// apart, input, environment, quoting, the host tier's hidden GPU, timeouts) and tests/process_test_util.h
// (children collected with a deadline). A helper that hid a failure would make every test using it vacuous.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "cli_test_util.h"
#include "process_test_util.h"

namespace kiln::test {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(RunShell, StdoutStderrAndTheExitCodeApart) {
  const CliResult r = run_shell("printf out; printf err >&2; exit 3");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.out, "out");
  EXPECT_EQ(r.err, "err");
  EXPECT_EQ(r.output(), "outerr");
  EXPECT_EQ(r.how_it_ended(), "exit 3");
}

// Input larger than a pipe holds, echoed back: input and output are interleaved, never a deadlock.
TEST(RunShell, StandardInputIsFedWhileOutputIsRead) {
  CliOptions o;
  o.stdin_text = std::string(1 << 20, 'x') + "end\n";
  const CliResult r = run_shell("cat; printf done >&2", o);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, o.stdin_text);
  EXPECT_EQ(r.err, "done");
  EXPECT_EQ(run_shell("cat").out, "");  // no input: end of file at once
}

TEST(RunShell, EnvironmentSetAndUnsetForTheChildOnly) {
  ::setenv("KILN_TEST_UTIL_PARENT", "parent", 1);
  CliOptions o;
  o.env = {{"KILN_TEST_UTIL_SET", "a b"}};
  o.unset_env = {"KILN_TEST_UTIL_PARENT"};
  CliResult r = run_shell("printf '%s|%s' \"$KILN_TEST_UTIL_SET\" \"${KILN_TEST_UTIL_PARENT-unset}\"", o);
  EXPECT_EQ(r.out, "a b|unset");
  r = run_shell("printf %s \"$KILN_TEST_UTIL_PARENT\"");
  EXPECT_EQ(r.out, "parent");  // inherited when not removed
  EXPECT_EQ(std::getenv("KILN_TEST_UTIL_SET"), nullptr);
  ::unsetenv("KILN_TEST_UTIL_PARENT");
}

// The host tier's runs never see a GPU; a run that asks to see the machine's inherits what this process has.
TEST(RunShell, TheHostTierHidesTheGpu) {
  ASSERT_TRUE(kHostTier) << "this test is built in the host tier";
  EXPECT_EQ(run_shell("printf %s \"${CUDA_VISIBLE_DEVICES-unset}\"").out, "");
  CliOptions seen;
  seen.hide_gpu = false;
  seen.unset_env = {"CUDA_VISIBLE_DEVICES"};
  EXPECT_EQ(run_shell("printf %s \"${CUDA_VISIBLE_DEVICES-unset}\"", seen).out, "unset");
}

TEST(RunShell, ASignalIsNotAnExitCode) {
  const CliResult r = run_shell("kill -SEGV $$");
  EXPECT_EQ(r.code, -1);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(r.how_it_ended().rfind("signal 11", 0), 0u) << r.how_it_ended();
}

// A hung command (and what it started) is killed at the deadline: the test fails, CI does not hang.
TEST(RunShell, AHungCommandIsKilledAtItsDeadline) {
  CliOptions o;
  o.timeout_s = 0.5;
  const auto t = std::chrono::steady_clock::now();
  const CliResult r = run_shell("printf started; sleep 60 & wait", o);
  EXPECT_LT(seconds_since(t), 20);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.code, -1);
  EXPECT_EQ(r.out, "started");  // what came before the deadline is kept
  EXPECT_EQ(r.how_it_ended(), "timed out (killed)");
}

TEST(ShellQuote, AnyTextIsOneWordAsWritten) {
  for (const std::string text : {"plain", "two words", "it's", "$HOME `id` \"q\" \\ ; | & * ?", "", "'''"}) {
    const CliResult r = run_shell("printf '%s|' " + shell_quote(text));
    EXPECT_EQ(r.out, text + "|") << text;
  }
}

// Arguments reach kiln as they are: a path with a space and a quote is one argument.
TEST(RunKiln, ArgumentsArePassedAsTheyAre) {
  const TempDir dir("kiln test util");
  std::filesystem::copy_file(std::string(KILN_SOURCE_DIR) + "/examples/small/layer_norm.json",
                             dir.file("a spec's copy.json"));
  const CliResult r = run_kiln_argv({"validate", dir.file("a spec's copy.json")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("OK   " + dir.file("a spec's copy.json")), std::string::npos) << r.out;
  const CliResult bad = run_kiln("validate " + shell_quote(dir.file("no such.json")));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find(dir.file("no such.json") + ": cannot open spec file"), std::string::npos) << bad.err;
}

TEST(TempDir, AFreshFolderRemovedWithItsContents) {
  std::string path;
  {
    const TempDir a, b;
    path = a.path();
    EXPECT_NE(a.path(), b.path());
    ASSERT_TRUE(std::filesystem::is_directory(path));
    EXPECT_TRUE(std::filesystem::is_empty(path));
    EXPECT_EQ(file_text(a.write("sub.txt", "text")), "text");
    EXPECT_EQ(a.file("sub.txt"), path + "/sub.txt");
  }
  if (!std::getenv("KILN_KEEP_TEST_DIRS")) {
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

TEST(RunInChildren, EachChildsExitInOrder) {
  const auto exits = run_in_children(
      4, [](int i) { return i + 10; }, 60);
  ASSERT_EQ(exits.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_GT(exits[i].pid, 0);
    EXPECT_TRUE(exits[i].exited) << exits[i].how_it_ended();
    EXPECT_EQ(exits[i].code, i + 10);
    EXPECT_FALSE(exits[i].timed_out);
  }
  EXPECT_NE(exits[0].pid, exits[1].pid);
}

// One hung child does not hang the test: it is killed at the deadline and said to be; the others are
// collected as they ended, one ended by a signal as its signal.
TEST(RunInChildren, AHungChildIsKilledAtTheDeadline) {
  const auto t = std::chrono::steady_clock::now();
  const auto exits = run_in_children(
      3,
      [](int i) {
        if (i == 1) ::pause();         // hangs
        if (i == 2) ::raise(SIGTERM);  // not SIGSEGV, which a sanitizer's handler turns into an exit
        return 0;
      },
      1.0);
  EXPECT_LT(seconds_since(t), 20);
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].exited);
  EXPECT_EQ(exits[0].code, 0);
  EXPECT_TRUE(exits[1].timed_out);
  EXPECT_FALSE(exits[1].exited);
  EXPECT_EQ(exits[1].how_it_ended(), "timed out (killed by the harness)");
  EXPECT_FALSE(exits[2].exited);
  EXPECT_EQ(exits[2].signal, SIGTERM);
}

TEST(ReadySignal, SaidOrNotWithinTheDeadline) {
  {
    ReadySignal ready;
    ChildProcess c([&] { return ready.signal() ? 0 : 1; });
    EXPECT_TRUE(ready.wait(30));
    EXPECT_EQ(c.wait(30).code, 0);
  }
  {
    ReadySignal ready;  // the child ends without saying so: false at once, not at the deadline
    ChildProcess c([] { return 5; });
    const auto t = std::chrono::steady_clock::now();
    EXPECT_FALSE(ready.wait(30));
    EXPECT_LT(seconds_since(t), 20);
    EXPECT_EQ(c.wait(30).code, 5);
  }
  {
    ReadySignal ready;  // the child hangs without saying so
    ChildProcess c([] {
      ::pause();
      return 0;
    });
    EXPECT_FALSE(ready.wait(0.3));
    EXPECT_TRUE(c.kill(SIGKILL));
    EXPECT_EQ(c.wait(30).signal, SIGKILL);
  }
}

// A child left running when its ChildProcess goes (a failed assertion returned early) is killed, not leaked.
TEST(ChildProcess, ARunningChildIsKilledWhenItsOwnerGoes) {
  pid_t pid = -1;
  {
    ChildProcess c([] {
      ::pause();
      return 0;
    });
    pid = c.pid();
    ASSERT_GT(pid, 0);
  }
  EXPECT_NE(::kill(pid, 0), 0) << "child " << pid << " still exists";
}

}  // namespace
}  // namespace kiln::test
