#include "common/ipc/curve.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/ipc/zmq_channel.h"
#include "common/user_file.h"

namespace k3::ipc {

namespace {

constexpr size_t kZ85KeyChars = 40;

bool ValidZ85Key(const std::string& k) {
  if (k.size() != kZ85KeyChars) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, k.c_str()) != nullptr;
}

std::string ReadSmallFile(const std::string& path) {
  return ReadUserFile(path, kMaxKeyFileBytes, "certificate", kExitBadInput);
}

// Key files are trusted only when no one else could have read or changed them, as ssh and
// PostgreSQL demand: owned by this user (or root), a secret key readable by its owner alone,
// an allow list (file or directory) writable by its owner alone.
void CheckKeyFileTrust(const std::string& path, bool secret) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw BadInput(path + ": cannot read certificate: " + std::strerror(errno));
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    throw BadInput(path + ": owned by another user (uid " + std::to_string(st.st_uid) + "); not trusted as a key");
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  if (secret && (st.st_mode & 077) != 0)
    throw BadInput(path + ": a secret key that other users can access (mode " + mode + "); chmod 600 it");
  if ((st.st_mode & 022) != 0)
    throw BadInput(path + ": writable by other users (mode " + mode + "), so anyone could change the keys; chmod go-w it");
}

bool ZplNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("$-_@.&+/", c) != nullptr;
}

// "name = value" (value quoted, or a bare word); the rest of the line may only be spaces or a
// comment. Returns false on anything else; `quoted` says whether the value had quotes.
bool ParseProperty(const std::string& s, std::string& name, std::string& value, bool& quoted) {
  size_t i = 0;
  while (i < s.size() && ZplNameChar(s[i])) ++i;
  if (i == 0) return false;
  name = s.substr(0, i);
  while (i < s.size() && s[i] == ' ') ++i;
  if (i >= s.size() || s[i] != '=') return false;
  ++i;
  while (i < s.size() && s[i] == ' ') ++i;
  if (i >= s.size()) return false;
  quoted = s[i] == '"' || s[i] == '\'';
  if (quoted) {
    const char q = s[i];
    const size_t end = s.find(q, i + 1);
    if (end == std::string::npos) return false;
    value = s.substr(i + 1, end - i - 1);
    i = end + 1;
  } else {
    const size_t start = i;
    while (i < s.size() && s[i] != ' ' && s[i] != '#') ++i;
    value = s.substr(start, i - start);
  }
  while (i < s.size() && s[i] == ' ') ++i;
  return i == s.size() || s[i] == '#';
}

void WriteNew(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw RuntimeFailure(path + ": cannot create: " + std::strerror(errno));
  ::fchmod(fd, mode);  // whatever the umask
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw RuntimeFailure(path + ": cannot write: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw RuntimeFailure(path + ": cannot write: " + std::strerror(errno));
}

std::string CertificateText(const CurveKeys& k, bool secret) {
  char when[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (gmtime_r(&now, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  std::string t = std::string("#   Written ") + when + " by k3-expert-server keygen\n";
  if (secret) {
    t += "#   ZeroMQ CURVE **Secret** Certificate\n";
    t += "#   Keep this file private (mode 0600): whoever holds it can act as this key.\n";
  } else {
    t += "#   ZeroMQ CURVE Public Certificate\n";
    t += "#   Give this file to the other side (an --allow list, or --expert-server-key).\n";
  }
  t += "\nmetadata\ncurve\n    public-key = \"" + k.public_key + "\"\n";
  if (secret) t += "    secret-key = \"" + k.secret_key + "\"\n";
  return t;
}

}  // namespace

CurveKeys GenerateCurveKeys() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw RuntimeFailure(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()) +
                         " (libzmq built without CURVE?)");
  return {pub, sec};
}

void WriteCertificatePair(const std::string& name, const CurveKeys& keys) {
  const std::string secret = name + "_secret";
  for (const std::string& p : {name, secret}) {
    struct stat st;
    if (::lstat(p.c_str(), &st) == 0) throw UsageError(p + ": exists; not overwriting a certificate");
  }
  WriteNew(secret, CertificateText(keys, true), 0600);
  WriteNew(name, CertificateText(keys, false), 0644);
}

CurveKeys ReadCertificate(const std::string& path, bool need_secret) {
  const std::string text = ReadSmallFile(path);
  // A file that mentions a secret key anywhere (even outside the curve section) is kept as one.
  const bool holds_secret = text.find("secret-key") != std::string::npos;
  const auto bad = [&](int line, const std::string& why) {
    return BadInput(path + ":" + std::to_string(line) + ": not a CURVE certificate: " + why);
  };
  std::map<std::string, std::string> curve;
  std::set<std::string> sections;
  std::string section;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    size_t indent = 0;
    while (indent < line.size() && line[indent] == ' ') ++indent;
    if (indent == line.size() || line[indent] == '#') continue;  // blank or comment
    if (line.find_first_of("\t\r") != std::string::npos) throw bad(n, "tab or carriage return");
    if (indent % 4 != 0) throw bad(n, "indentation is not a multiple of 4 spaces");
    const std::string body = line.substr(indent);
    if (indent == 0) {
      section = body;
      while (!section.empty() && section.back() == ' ') section.pop_back();
      if (section != "metadata" && section != "curve") throw bad(n, "unknown section '" + section + "'");
      if (!sections.insert(section).second) throw bad(n, "section '" + section + "' twice");
      continue;
    }
    if (indent != 4 || section.empty()) throw bad(n, "property outside a section or nested too deep");
    std::string name, value;
    bool quoted = false;
    if (!ParseProperty(body, name, value, quoted)) throw bad(n, "expected name = \"value\"");
    if (section == "metadata") continue;
    if (name != "public-key" && name != "secret-key") throw bad(n, "unknown curve property '" + name + "'");
    if (!quoted || !ValidZ85Key(value)) throw bad(n, name + " is not a quoted 40-character Z85 key");
    if (!curve.emplace(name, value).second) throw bad(n, name + " twice");
  }
  if (!curve.count("public-key")) throw bad(n, "no curve public-key");
  CheckKeyFileTrust(path, holds_secret);
  CurveKeys k{curve["public-key"], {}};
  if (need_secret) {
    if (!curve.count("secret-key"))
      throw BadInput(path + ": holds no secret-key (pass the NAME_secret file of the key pair)");
    k.secret_key = curve["secret-key"];
    char derived[41];
    if (zmq_curve_public(derived, k.secret_key.c_str()) != 0 || k.public_key != derived)
      throw BadInput(path + ": its public-key does not belong to its secret-key");
  }
  return k;
}

std::set<std::string> ReadAllowedKeys(const std::vector<std::string>& paths) {
  std::set<std::string> keys;
  for (const std::string& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) throw BadInput(p + ": cannot read certificate: " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
      keys.insert(ReadCertificate(p, false).public_key);
      continue;
    }
    CheckKeyFileTrust(p, false);  // a directory others can write to could gain a key at any time
    DIR* d = ::opendir(p.c_str());
    if (!d) throw BadInput(p + ": cannot read directory: " + std::strerror(errno));
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string nm = e->d_name;
      if (nm == "." || nm == ".." || nm[0] == '.') continue;
      if (nm.size() >= 7 && nm.compare(nm.size() - 7, 7, "_secret") == 0) continue;
      names.push_back(nm);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    size_t found = 0;
    for (const std::string& nm : names) {
      const std::string f = p + "/" + nm;
      if (::stat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      keys.insert(ReadCertificate(f, false).public_key);
      ++found;
    }
    if (found == 0) throw BadInput(p + ": no public certificates in this directory");
  }
  if (keys.empty()) throw BadInput("no client certificates to allow");
  return keys;
}

CurveClientKeys ReadClientKeys(const std::string& client_secret_cert, const std::string& server_cert) {
  return {ReadCertificate(client_secret_cert, true), ReadCertificate(server_cert, false).public_key};
}

void ApplyClientKeys(zmq::socket_t& s, const CurveClientKeys& keys) {
  s.set(zmq::sockopt::curve_serverkey, keys.server_public);
  s.set(zmq::sockopt::curve_publickey, keys.client.public_key);
  s.set(zmq::sockopt::curve_secretkey, keys.client.secret_key);
}

void ApplyServerKeys(zmq::socket_t& s, const CurveKeys& server) {
  s.set(zmq::sockopt::curve_server, 1);
  s.set(zmq::sockopt::curve_secretkey, server.secret_key);
  s.set(zmq::sockopt::zap_domain, std::string("k3"));
}

ZapHandler::ZapHandler(zmq::context_t& ctx, std::set<std::string> allowed)
    : sock_(ctx, zmq::socket_type::rep), allowed_(std::move(allowed)) {
  sock_.set(zmq::sockopt::linger, 0);
  try {
    sock_.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    throw RuntimeFailure(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  thread_ = std::thread([this] { Run(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

void ZapHandler::Run() {
  while (!stop_) {
    zmq::pollitem_t item{sock_.handle(), 0, ZMQ_POLLIN, 0};
    if (Poll(&item, 1, std::chrono::milliseconds(100)) <= 0) continue;
    std::vector<std::string> req;
    try {
      for (bool more = true; more;) {
        zmq::message_t part;
        if (!sock_.recv(part, zmq::recv_flags::dontwait)) break;
        more = part.more();
        req.emplace_back(static_cast<const char*>(part.data()), part.size());
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (req.empty()) continue;
    // version, request id, domain, address, identity, mechanism, credentials...
    std::string status = "400", text = "key not allowed", user;
    if (req.size() >= 7 && req[0] == "1.0" && req[5] == "CURVE" && req[6].size() == 32) {
      char z85[41];
      zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(req[6].data()), 32);
      if (allowed_.count(z85)) {
        status = "200";
        text = "OK";
        user = z85;
      }
    } else {
      text = "CURVE required";
    }
    (status == "200" ? allowed_n_ : refused_n_)++;
    const std::string reply[] = {"1.0", req.size() > 1 ? req[1] : "", status, text, user, ""};
    try {
      for (size_t i = 0; i < 6; ++i)
        (void)sock_.send(zmq::buffer(reply[i]), i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

HandshakeWatch::HandshakeWatch(zmq::context_t& ctx, zmq::socket_t& watched, std::string endpoint, bool curve)
    : watched_(watched), pair_(ctx, zmq::socket_type::pair), endpoint_(std::move(endpoint)), curve_(curve) {
  static std::atomic<uint64_t> serial{0};
  char addr[96];
  std::snprintf(addr, sizeof addr, "inproc://k3-handshake-watch-%p-%llu", static_cast<void*>(this),
                static_cast<unsigned long long>(serial++));
  const int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
  if (zmq_socket_monitor(watched_.handle(), addr, events) != 0)
    throw RuntimeFailure(std::string("zmq_socket_monitor: ") + zmq_strerror(zmq_errno()));
  pair_.set(zmq::sockopt::linger, 0);
  Connect(pair_, addr);
}

HandshakeWatch::~HandshakeWatch() { (void)zmq_socket_monitor(watched_.handle(), nullptr, 0); }

std::optional<std::string> HandshakeWatch::Poll() {
  for (;;) {
    std::optional<RawMessage> m = RecvRaw(pair_, false);
    if (!m) break;
    if (m->frames.size() != 2 || m->frames[0].size() != 6) continue;
    uint16_t event = 0;
    uint32_t value = 0;
    std::memcpy(&event, m->frames[0].data(), 2);
    std::memcpy(&value, static_cast<const char*>(m->frames[0].data()) + 2, 4);
    if (refused_) continue;
    const std::string who = "the expert server " + endpoint_;
    switch (event) {
      case ZMQ_EVENT_CONNECTED:
        connected_ = true;
        break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        connected_ = false;
        closed_in_handshake_ = 0;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        refused_ = who + " refused this client's key (ZAP status " + std::to_string(value) +
                   "): add its public certificate to the server's --allow";
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
          refused_ = curve_ ? who + " refused the handshake: it does not use CURVE keys, this client does"
                            : who + " refused the handshake: it requires CURVE keys and this client has none "
                                    "(--client-key, --expert-server-key)";
        } else {
          char code[16];
          std::snprintf(code, sizeof code, "0x%x", value);
          refused_ = who + " refused the handshake (protocol error " + code +
                     (curve_ ? "): is --expert-server-key that server's public certificate?" : ")");
        }
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      case ZMQ_EVENT_DISCONNECTED:
        if (connected_ && ++closed_in_handshake_ >= 3 && curve_)
          // libzmq does not always report the mechanism mismatch before the connection drops,
          // so this line names every cause a CURVE client cannot tell apart.
          refused_ = who + " closed 3 connections during the CURVE handshake: it does not use CURVE keys, "
                           "or --expert-server-key is not its public certificate, or this client's key is "
                           "not allowed there";
        connected_ = false;
        break;
      default:
        break;
    }
  }
  return refused_;
}

}  // namespace k3::ipc
