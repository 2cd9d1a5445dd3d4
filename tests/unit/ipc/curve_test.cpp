// common/ipc/curve: certificates written by WriteCertificatePair read back; ReadAllowedKeys skips
// secret files; a ZAP handler lets an allowed key through with its key as User-Id and refuses
// another, which the client's HandshakeWatch reports.
#include "common/ipc/curve.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/ipc/zmq_channel.h"

namespace k3::ipc {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/k3-curve-test-XXXXXX";
  return ::mkdtemp(tmpl);
}

TEST(Curve, CertificatePairRoundTrip) {
  const std::string dir = TempDir();
  const CurveKeys k = GenerateCurveKeys();
  WriteCertificatePair(dir + "/a", k);
  struct stat st;
  ASSERT_EQ(::stat((dir + "/a_secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const CurveKeys pub = ReadCertificate(dir + "/a", false);
  EXPECT_EQ(pub.public_key, k.public_key);
  EXPECT_TRUE(pub.secret_key.empty());
  const CurveKeys both = ReadCertificate(dir + "/a_secret", true);
  EXPECT_EQ(both.public_key, k.public_key);
  EXPECT_EQ(both.secret_key, k.secret_key);
  try {
    ReadCertificate(dir + "/a", true);
    FAIL() << "a public certificate read as a secret one";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadInput);
  }
  try {
    WriteCertificatePair(dir + "/a", k);
    FAIL() << "overwrote a certificate";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
  }
  // A directory: public certificates only (a_secret is skipped), each key once.
  WriteCertificatePair(dir + "/b", GenerateCurveKeys());
  EXPECT_EQ(ReadAllowedKeys({dir}).size(), 2u);
  EXPECT_EQ(ReadAllowedKeys({dir + "/a", dir + "/a_secret"}).size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(Curve, IndentedOrCommentedVariantsParse) {
  const std::string dir = TempDir();
  const CurveKeys k = GenerateCurveKeys();
  std::ofstream(dir + "/c") << "# comment\n\nmetadata\n    name = \"x\"   # trailing comment\ncurve\n    public-key='"
                            << k.public_key << "'\n";
  EXPECT_EQ(ReadCertificate(dir + "/c", false).public_key, k.public_key);
  std::ofstream(dir + "/d") << "curve\n        public-key = \"" << k.public_key << "\"\n";  // 8 spaces
  EXPECT_THROW(ReadCertificate(dir + "/d", false), Error);
  std::filesystem::remove_all(dir);
}

// Polls the client's watch and receives on the server until `done` says so or 5 s pass.
template <class Done>
bool Until(Done done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Curve, ZapAllowsListedKeysAndTheWatchReportsRefusal) {
  const CurveKeys server = GenerateCurveKeys(), allowed = GenerateCurveKeys(), stranger = GenerateCurveKeys();
  zmq::context_t ctx;
  ZapHandler zap(ctx, {allowed.public_key});
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  ApplyServerKeys(router, server);
  router.bind("tcp://127.0.0.1:*");
  const std::string ep = router.get(zmq::sockopt::last_endpoint);

  zmq::socket_t good(ctx, zmq::socket_type::dealer);
  good.set(zmq::sockopt::linger, 0);
  ApplyClientKeys(good, {allowed, server.public_key});
  HandshakeWatch good_watch(ctx, good, ep, true);
  good.connect(ep);
  (void)good.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  std::optional<RawMessage> got;
  ASSERT_TRUE(Until([&] { return (got = RecvRaw(router, true)).has_value(); }));
  EXPECT_EQ(got->user_id, allowed.public_key);
  EXPECT_FALSE(good_watch.Poll().has_value());

  zmq::socket_t bad(ctx, zmq::socket_type::dealer);
  bad.set(zmq::sockopt::linger, 0);
  ApplyClientKeys(bad, {stranger, server.public_key});
  HandshakeWatch bad_watch(ctx, bad, ep, true);
  bad.connect(ep);
  std::optional<std::string> why;
  ASSERT_TRUE(Until([&] { return (why = bad_watch.Poll()).has_value(); }));
  EXPECT_NE(why->find("refused this client's key"), std::string::npos) << *why;
  EXPECT_EQ(zap.refused_count(), 1u);

  zmq::socket_t none(ctx, zmq::socket_type::dealer);
  none.set(zmq::sockopt::linger, 0);
  HandshakeWatch none_watch(ctx, none, ep, false);
  none.connect(ep);
  ASSERT_TRUE(Until([&] { return (why = none_watch.Poll()).has_value(); }));
  EXPECT_NE(why->find("requires CURVE keys"), std::string::npos) << *why;
}

}  // namespace
}  // namespace k3::ipc
