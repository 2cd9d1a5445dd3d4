// common/secret_file: api_key_file is one line, owner-only, a regular file of bounded size.
#include "common/secret_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/k3-secret-file-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Put(const std::string& text, mode_t mode = 0600) {
    const std::string p = dir_ + "/key";
    std::ofstream(p, std::ios::binary) << text;
    EXPECT_EQ(::chmod(p.c_str(), mode), 0);
    return p;
  }
  // The message of the Error (exit 7) reading `path` throws.
  static std::string Refused(const std::string& path) {
    try {
      ReadSecretFile(path, "api_key_file");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitBadInput) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "read " << path;
    return "";
  }
  std::string dir_;
};

TEST_F(SecretFileTest, OneLineWithOrWithoutItsNewline) {
  EXPECT_EQ(ReadSecretFile(Put("sk-abc123\n"), "api_key_file"), "sk-abc123");
  EXPECT_EQ(ReadSecretFile(Put("sk-abc123"), "api_key_file"), "sk-abc123");
  EXPECT_EQ(ReadSecretFile(Put("sk-abc123\r\n"), "api_key_file"), "sk-abc123");
  EXPECT_EQ(ReadSecretFile(Put("k", 0400), "api_key_file"), "k");
}

TEST_F(SecretFileTest, AnythingButOneSecretLineIsRefused) {
  EXPECT_NE(Refused(Put("")).find("is empty"), std::string::npos);
  EXPECT_NE(Refused(Put("\n")).find("is empty"), std::string::npos);
  EXPECT_NE(Refused(Put("a\nb\n")).find("more than one line"), std::string::npos);
  EXPECT_NE(Refused(Put("a\n\n")).find("more than one line"), std::string::npos);
  EXPECT_NE(Refused(Put("sk abc\n")).find("a space"), std::string::npos);
  EXPECT_NE(Refused(Put(" sk\n")).find("a space"), std::string::npos);
  EXPECT_NE(Refused(Put(std::string("a\0b", 3))).find("control character"), std::string::npos);
  EXPECT_NE(Refused(Put(std::string(5000, 'k'))).find("above the limit of 4096"), std::string::npos);
}

TEST_F(SecretFileTest, OtherUsersMustNotBeAbleToReadOrChangeIt) {
  for (mode_t m : {0640, 0604, 0660, 0644, 0602}) {
    const std::string msg = Refused(Put("sk\n", m));
    EXPECT_NE(msg.find("other users can access it"), std::string::npos) << msg;
    EXPECT_NE(msg.find("chmod 600"), std::string::npos) << msg;
  }
  if (::geteuid() == 0) {  // root can give the file away
    const std::string p = Put("sk\n");
    ASSERT_EQ(::chown(p.c_str(), 65534, 65534), 0);
    EXPECT_NE(Refused(p).find("owned by another user (uid 65534)"), std::string::npos);
  }
  EXPECT_NE(Refused(dir_).find("not a regular file"), std::string::npos);
  EXPECT_NE(Refused(dir_ + "/missing").find("cannot open"), std::string::npos);
  EXPECT_NE(Refused("/dev/null").find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace k3
