// write_file_atomically: never half-written, never over an existing file unasked, never over a protected one.
#include "kiln/core/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_test_util.h"  // TempDir

namespace kiln {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed"; }
  std::string file(const std::string& name) const { return dir_.file(name); }
  static std::string read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
  // Every name in the folder: a failed or finished write leaves no temporary file behind.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_.path())) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  test::TempDir dir_{"kiln_atomic_file"};
};

TEST_F(AtomicFile, WritesANewFileAndLeavesNoTemporary) {
  FileWriteOptions o;
  ASSERT_TRUE(write_file_atomically(file("out.bin"), "hello", o).is_ok());
  EXPECT_EQ(read(file("out.bin")), "hello");
  EXPECT_EQ(names(), std::vector<std::string>{"out.bin"});
  // The usual mode (0666 less the umask), not a temporary file's 0600.
  mode_t mask = ::umask(022);
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::stat(file("out.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

TEST_F(AtomicFile, RefusesAnExistingFileUnlessOverwrite) {
  write(file("out.bin"), "precious");
  FileWriteOptions o;
  o.what = "bundle";
  Status s = write_file_atomically(file("out.bin"), "new", o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bundle " + file("out.bin") + " already exists (pass --force to write over it)"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(read(file("out.bin")), "precious");
  EXPECT_EQ(names(), std::vector<std::string>{"out.bin"});
  EXPECT_EQ(check_destination(file("out.bin"), o).code(), StatusCode::kInvalidArgument);

  o.overwrite = true;
  ASSERT_TRUE(write_file_atomically(file("out.bin"), "new", o).is_ok());
  EXPECT_EQ(read(file("out.bin")), "new");
  EXPECT_EQ(names(), std::vector<std::string>{"out.bin"});
}

// Regression (hostile-user test): `kiln plans export /dev/null --force` made /dev/null a regular file.
// --force replaces regular files only: a FIFO, a device or a symbolic link is refused and left as it was.
TEST_F(AtomicFile, ForceNeverReplacesADevicePipeOrLink) {
  FileWriteOptions o;
  o.what = "bundle";
  o.overwrite = true;
  ASSERT_EQ(::mkfifo(file("fifo").c_str(), 0644), 0);
  write(file("target.txt"), "kept");
  fs::create_symlink(file("target.txt"), file("link"));
  for (const std::string& p : {file("fifo"), file("link"), std::string("/dev/null")}) {
    Status s = write_file_atomically(p, "new", o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << p;
    EXPECT_NE(s.message().find("is not a regular file"), std::string::npos) << s.message();
  }
  struct stat st {};
  ASSERT_EQ(::lstat(file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::lstat(file("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(read(file("target.txt")), "kept");
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

// The one check of a destination's folder (kiln replay's --store and --record-shapes, kiln run's store,
// check_destination without create_folders): a missing folder and a file in a folder's place each said
// plainly, naming the folder; the caller's context in front.
TEST_F(AtomicFile, CheckParentFolderNamesAMissingFolderOrAFileInItsPlace) {
  write(file("afile"), "x");
  EXPECT_TRUE(check_parent_folder(file("new.bin")).is_ok());
  EXPECT_TRUE(check_parent_folder("new.bin").is_ok());  // the working folder
  EXPECT_TRUE(check_parent_folder("/new.bin").is_ok());
  Status missing = check_parent_folder(file("nodir/new.bin"));
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.message(), "folder " + file("nodir") + " does not exist");
  Status through = check_parent_folder(file("afile/sub/new.bin"));
  EXPECT_EQ(through.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(through.message(), "folder " + file("afile/sub") + " does not exist");
  Status not_folder = check_parent_folder(file("afile/new.bin"));
  EXPECT_EQ(not_folder.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(not_folder.message(), file("afile") + " is not a folder");

  FileWriteOptions o;
  o.what = "normalized graph";
  o.create_folders = false;
  Status dest = check_destination(file("nodir/g.json"), o);
  EXPECT_EQ(dest.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dest.message(),
            "normalized graph destination " + file("nodir/g.json") + ": folder " + file("nodir") + " does not exist");
  o.create_folders = true;
  EXPECT_TRUE(check_destination(file("nodir/g.json"), o).is_ok());
}

// A file that appears while the contents are being made is not replaced: the final move never clobbers.
TEST_F(AtomicFile, AFileThatAppearsDuringTheWriteIsNotReplaced) {
  FileWriteOptions o;
  Status s = write_file_atomically(file("out.bin"), o, [&](const std::string& tmp) {
    write(tmp, "mine");
    write(file("out.bin"), "theirs");
    return Status::ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.message();
  EXPECT_EQ(read(file("out.bin")), "theirs");
  EXPECT_EQ(names(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFile, AFailedFillLeavesNothing) {
  FileWriteOptions o;
  Status s = write_file_atomically(file("out.bin"), o, [&](const std::string& tmp) {
    write(tmp, "half");
    return unavailable("disk went away");
  });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(names().empty()) << names().size();

  write(file("out.bin"), "old");
  o.overwrite = true;
  s = write_file_atomically(file("out.bin"), o, [&](const std::string& tmp) {
    write(tmp, "half");
    return unavailable("disk went away");
  });
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(read(file("out.bin")), "old");
  EXPECT_EQ(names(), std::vector<std::string>{"out.bin"});
}

// The temporary file is in the destination's folder (same file system, so the rename is atomic).
TEST_F(AtomicFile, TheTemporaryFileIsBesideTheDestination) {
  fs::create_directories(file("sub"));
  std::string seen;
  FileWriteOptions o;
  ASSERT_TRUE(write_file_atomically(file("sub/out.bin"), o, [&](const std::string& tmp) {
                seen = tmp;
                write(tmp, "x");
                return Status::ok();
              }).is_ok());
  EXPECT_EQ(fs::path(seen).parent_path(), fs::path(file("sub")));
  EXPECT_EQ(fs::path(seen).filename().string().rfind(".out.bin.kiln-tmp-", 0), 0u) << seen;
}

TEST_F(AtomicFile, CreatesMissingFoldersAndRefusesAFolder) {
  FileWriteOptions o;
  ASSERT_TRUE(write_file_atomically(file("a/b/out.bin"), "x", o).is_ok());
  EXPECT_EQ(read(file("a/b/out.bin")), "x");
  o.overwrite = true;
  Status s = write_file_atomically(file("a"), "x", o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is a folder, not a file"), std::string::npos) << s.message();
}

// Protected files (a store and its companions) are refused by name and by identity, with or without
// overwrite: through another spelling of the path, a symlink, a hard link, and a companion not there yet.
TEST_F(AtomicFile, ProtectedFilesAreNeverWrittenOver) {
  write(file("plans.db"), "the store");
  ASSERT_EQ(::symlink(file("plans.db").c_str(), file("link.db").c_str()), 0);
  ASSERT_EQ(::link(file("plans.db").c_str(), file("hard.db").c_str()), 0);
  fs::create_directories(file("sub"));
  FileWriteOptions o;
  o.what = "bundle";
  o.protected_paths = {file("plans.db"), file("plans.db-wal"), file("plans.db-shm"), file("plans.db-journal")};
  o.protected_what = "the plan store this export reads";
  for (bool overwrite : {false, true}) {
    o.overwrite = overwrite;
    for (const std::string& dest : {file("plans.db"), file("sub/../plans.db"), file("link.db"), file("hard.db"),
                                    file("plans.db-wal"), file("./plans.db-shm")}) {
      Status s = write_file_atomically(dest, "bundle bytes", o);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << dest;
      EXPECT_NE(s.message().find("the plan store this export reads (never written over, --force or not)"),
                std::string::npos)
          << s.message();
      EXPECT_EQ(check_destination(dest, o).code(), StatusCode::kInvalidArgument) << dest;
    }
  }
  EXPECT_EQ(read(file("plans.db")), "the store");
  EXPECT_FALSE(fs::exists(file("plans.db-wal")));
  EXPECT_FALSE(fs::exists(file("plans.db-shm")));
  // Another file in the same folder is fine.
  ASSERT_TRUE(write_file_atomically(file("plans.kilnbundle"), "bundle bytes", o).is_ok());
}

TEST_F(AtomicFile, AnEmptyPathIsRefused) {
  FileWriteOptions o;
  EXPECT_EQ(write_file_atomically("", "x", o).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
