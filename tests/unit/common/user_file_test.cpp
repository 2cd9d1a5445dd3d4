// common/user_file: reads refuse what is not a regular file (without blocking) and what is over
// the limit; AtomicFile never writes through a symlink, device or planted temporary, keeps the
// target's mode, and leaves nothing behind when it is not committed.
#include "common/user_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace k3 {
namespace {

namespace fs = std::filesystem;

class UserFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/k3-user-file-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& name) const { return dir_ + "/" + name; }
  static void Put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
  static std::string Get(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  static unsigned ModeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 0777;
  }
  // The error of `f`, which must throw k3::Error with `code`.
  template <class F>
  static std::string ErrorOf(F f, ExitCode code) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "did not throw";
    return "";
  }
  size_t Entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }
  std::string dir_;
};

TEST_F(UserFileTest, ReadsARegularFileWhole) {
  Put(P("a"), std::string("x\0y", 3));
  EXPECT_EQ(ReadUserFile(P("a"), 3, "prompt", kExitBadInput), std::string("x\0y", 3));
  EXPECT_EQ(CheckUserFile(P("a"), 3, "prompt", kExitBadInput), 3u);
}

TEST_F(UserFileTest, RefusesAFileOverTheLimitBeforeReadingIt) {
  Put(P("big"), std::string(11, 'z'));
  const std::string e = ErrorOf([&] { ReadUserFile(P("big"), 10, "config", kExitUsage); }, kExitUsage);
  EXPECT_EQ(e, "config " + P("big") + ": 11 bytes, above the limit of 10");
}

TEST_F(UserFileTest, RefusesDevicesDirectoriesAndFifosWithoutBlocking) {
  EXPECT_NE(ErrorOf([] { ReadUserFile("/dev/zero", 1 << 20, "--prompt-file", kExitBadInput); }, kExitBadInput)
                .find("is a character device"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadUserFile(dir_, 1 << 20, "", kExitBadInput); }, kExitBadInput).find("is a directory"),
            std::string::npos);
  // No writer: a blocking open would wait forever (the test would time out).
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);
  EXPECT_NE(ErrorOf([&] { CheckUserFile(P("fifo"), 1 << 20, "state file", kExitBadInput); }, kExitBadInput)
                .find("is a FIFO"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadUserFile(P("absent"), 1, "", kExitBadInput); }, kExitBadInput).find("cannot open"),
            std::string::npos);
}

TEST_F(UserFileTest, WritesANewFileWithTheUmasksMode) {
  const mode_t old = ::umask(027);
  WriteFileAtomically(P("new"), "hello", "--out", kExitOutput);
  ::umask(old);
  EXPECT_EQ(Get(P("new")), "hello");
  EXPECT_EQ(ModeOf(P("new")), 0640u);
  EXPECT_EQ(Entries(), 1u);  // no temporary left
}

TEST_F(UserFileTest, ReplacingAFileKeepsItsMode) {
  Put(P("f"), "old");
  ASSERT_EQ(::chmod(P("f").c_str(), 0600), 0);
  WriteFileAtomically(P("f"), "new", "", kExitOutput);
  EXPECT_EQ(Get(P("f")), "new");
  EXPECT_EQ(ModeOf(P("f")), 0600u);
}

TEST_F(UserFileTest, NeverWritesThroughASymlinkOrADevice) {
  Put(P("victim"), "precious");
  fs::create_symlink(P("victim"), P("link"));
  const std::string e = ErrorOf([&] { WriteFileAtomically(P("link"), "evil", "--save-state", kExitOutput); },
                                kExitOutput);
  EXPECT_EQ(e, "--save-state " + P("link") + ": is a symbolic link; not replaced");
  EXPECT_EQ(Get(P("victim")), "precious");
  EXPECT_TRUE(fs::is_symlink(P("link")));
  ErrorOf([] { WriteFileAtomically("/dev/null", "x", "", kExitOutput); }, kExitOutput);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  ErrorOf([&] { CheckOutputPath(P("link"), "--out"); }, kExitOutput);
  ErrorOf([&] { CheckOutputPath(P("no-dir/f"), "--out"); }, kExitOutput);
  CheckOutputPath(P("victim"), "--out");  // a regular file may be replaced
}

TEST_F(UserFileTest, APlantedTemporaryNameIsNeverOpened) {
  // The old scheme's predictable names (PATH.tmp, PATH.tmp-<pid>) as links to a victim.
  Put(P("victim"), "precious");
  fs::create_symlink(P("victim"), P("s.tmp"));
  fs::create_symlink(P("victim"), P("s.tmp-" + std::to_string(::getpid())));
  WriteFileAtomically(P("s"), "state", "", kExitOutput);
  EXPECT_EQ(Get(P("s")), "state");
  EXPECT_EQ(Get(P("victim")), "precious");
}

TEST_F(UserFileTest, AnUncommittedFileLeavesTheTargetAndNoTemporary) {
  Put(P("t"), "before");
  {
    AtomicFile f(P("t"), "", kExitOutput);
    f.Write("half");
  }
  EXPECT_EQ(Get(P("t")), "before");
  EXPECT_EQ(Entries(), 1u);
}

}  // namespace
}  // namespace k3
