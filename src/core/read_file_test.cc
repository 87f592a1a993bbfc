// read_file (kiln/core/read_file.h): regular files only, bounded, named errors.
#include "kiln/core/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>

#include "cli_test_util.h"  // TempDir

namespace kiln {
namespace {

using test::TempDir;

void write(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

TEST(ReadFile, ReadsAWholeFileWithItsBytes) {
  const TempDir dir("kiln_read_file");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const std::string d = dir.path(), p = d + "/a.bin";
  std::string text(200000, 'x');
  text[7] = '\0';
  write(p, text);
  auto got = read_file(p);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, text);
  auto at_limit = read_file(p, {"blob", 200000});
  EXPECT_TRUE(at_limit.is_ok());
}

TEST(ReadFile, RefusesWhatIsNotAReadableRegularFileWithinItsLimit) {
  const TempDir dir("kiln_read_file");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const std::string d = dir.path();
  auto missing = read_file(d + "/none.json", {"trace", -1});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("trace '" + d + "/none.json' cannot be read"), std::string::npos);
  auto folder = read_file(d, {"spec", -1});
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(folder.status().message().find("is a folder, not a file"), std::string::npos);
  auto device = read_file("/dev/zero", {"trace", 1024});
  EXPECT_EQ(device.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(device.status().message().find("not a regular file"), std::string::npos);
  // Pipes allowed: a device by its name still is not read (/dev/ptmx never answers).
  ReadFileOptions pipes{"spec", 1024};
  pipes.regular_only = false;
  for (const char* dev : {"/dev/zero", "/dev/ptmx"}) {
    auto d2 = read_file(dev, pipes);
    EXPECT_EQ(d2.status().code(), StatusCode::kInvalidArgument) << dev;
    EXPECT_NE(d2.status().message().find("is a device or socket, not a file"), std::string::npos) << dev;
  }
  write(d + "/big", std::string(1025, 'y'));
  auto big = read_file(d + "/big", {"trace", 1024});
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(is_over_read_limit(big.status())) << big.status().to_string();
  EXPECT_FALSE(is_over_read_limit(folder.status()));
  EXPECT_FALSE(is_over_read_limit(missing.status()));
}

// A FIFO on disk that no writer opens is refused at once, pipes allowed or not: it used to block the open
// forever (`kiln validate FIFO`). Should the read still wait, the test opens a writer itself so that it
// fails instead of hanging.
TEST(ReadFile, AFifoOnDiskIsRefusedWithoutWaitingForAWriter) {
  const TempDir dir("kiln_read_file");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  const std::string fifo = dir.file("spec.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (bool regular_only : {false, true}) {
    auto read = std::async(std::launch::async, [&] { return read_file(fifo, {"spec file", 1024, regular_only}); });
    if (read.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // the reader waiting in open() goes on
      if (w >= 0) ::close(w);
      ADD_FAILURE() << "read_file waited for a writer (regular_only " << regular_only << ")";
    }
    auto got = read.get();
    ASSERT_FALSE(got.is_ok()) << "regular_only " << regular_only;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    const std::string want = regular_only ? "spec file '" + fifo + "' is not a regular file"
                                          : "spec file '" + fifo + "' is a named pipe (FIFO)";
    EXPECT_NE(got.status().message().find(want), std::string::npos) << got.status().to_string();
    EXPECT_EQ(check_readable_file(fifo, {"spec file", 1024, regular_only}).message(), got.status().message());
  }
}

// A pipe this process holds, named by its descriptor (what `<(cat spec.json)` passes), is read when pipes
// are allowed, and refused when only regular files are.
TEST(ReadFile, APipeNamedByItsDescriptorIsReadWhenPipesAreAllowed) {
  for (const std::string folder : {"/dev/fd/", "/proc/self/fd/"}) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const std::string text = R"({"spec": true})";
    ASSERT_EQ(::write(p[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(p[1]);
    const std::string path = folder + std::to_string(p[0]);
    auto got = read_file(path, {"spec file", 1024, /*regular_only=*/false});
    ASSERT_TRUE(got.is_ok()) << path << ": " << got.status().to_string();
    EXPECT_EQ(*got, text);
    auto refused = read_file(path, {"trace", 1024});
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("is not a regular file"), std::string::npos);
    ::close(p[0]);
  }
}

// An anonymous pipe is read by any path that leads to it (a link to /dev/stdin or /dev/fd/N: review), and a
// named FIFO is refused by any path, its descriptor's too (`exec 5<>fifo; kiln validate /dev/fd/5` blocked).
TEST(ReadFile, APipeIsTakenByWhatItIsNotByItsPath) {
  const TempDir dir("kiln_read_file");
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp failed";
  ReadFileOptions pipes{"spec file", 1024};
  pipes.regular_only = false;
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const std::string text = R"({"spec": 1})";
  ASSERT_EQ(::write(p[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(p[1]);
  const std::string link = dir.path() + "/spec.json";
  ASSERT_EQ(::symlink(("/proc/self/fd/" + std::to_string(p[0])).c_str(), link.c_str()), 0);
  auto got = read_file(link, pipes);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, text);
  ::close(p[0]);
  const std::string fifo = dir.path() + "/named.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int held = ::open(fifo.c_str(), O_RDWR);  // a reader and a writer held here: a read would wait forever
  ASSERT_GE(held, 0);
  auto refused = read_file("/dev/fd/" + std::to_string(held), pipes);
  ::close(held);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("is a named pipe (FIFO)"), std::string::npos)
      << refused.status().to_string();
}

TEST(ReadFile, NamesOpenDescriptorKnowsTheDescriptorFolders) {
  for (const char* yes : {"/dev/fd/63", "/proc/self/fd/0", "/proc/thread-self/fd/12", "/dev/stdin"})
    EXPECT_TRUE(names_open_descriptor(yes)) << yes;
  for (const char* no :
       {"/dev/fd/", "/dev/fd/6x", "/dev/fd/63/x", "/tmp/dev/fd/63", "dev/fd/3", "/proc/1/fd/3", "/tmp/spec.fifo", ""})
    EXPECT_FALSE(names_open_descriptor(no)) << no;
}

}  // namespace
}  // namespace kiln
