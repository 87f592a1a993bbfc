// read_file (kiln/core/read_file.h): regular files only, bounded, named errors.
#include "kiln/core/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
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
  write(d + "/big", std::string(1025, 'y'));
  auto big = read_file(d + "/big", {"trace", 1024});
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(is_over_read_limit(big.status())) << big.status().to_string();
  EXPECT_FALSE(is_over_read_limit(folder.status()));
  EXPECT_FALSE(is_over_read_limit(missing.status()));
}

}  // namespace
}  // namespace kiln
