// ZeroMQ CURVE for the expert protocol over the network (k3-expert-server and the fetcher's
// remote socket): czmq-style certificates on disk, client and server socket keys, the ZAP
// handler that admits only listed client keys, and a handshake watch that turns a refused key
// into an error within seconds instead of a read timeout.
//
// Certificate files (docs/formats.md "CURVE certificates") are ZPL text as czmq writes them:
//
//     #   ZeroMQ CURVE Public Certificate
//     metadata
//     curve
//         public-key = "<40 Z85 characters>"
//         secret-key = "<40 Z85 characters>"      (only in NAME_secret)
//
// Every reader here throws k3::Error(kExitBadInput) with one line naming the file.
#pragma once
#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace k3::ipc {

// Z85 text of a CURVE key pair (40 characters each); secret_key is empty for a public certificate.
struct CurveKeys {
  std::string public_key, secret_key;
};

// A fresh key pair from libzmq (zmq_curve_keypair).
CurveKeys GenerateCurveKeys();

// Writes NAME (public key only, mode 0644) and NAME_secret (both keys, mode 0600). Refuses to
// overwrite an existing file (exit 2). Throws k3::Error(kExitRuntime) when a file cannot be written.
void WriteCertificatePair(const std::string& name, const CurveKeys& keys);

// Parses one certificate. `need_secret`: the file must hold a secret-key too (and it must
// belong to the public key). Strict: unknown sections or curve properties, bad indentation,
// unquoted or malformed Z85 keys are errors.
CurveKeys ReadCertificate(const std::string& path, bool need_secret);

// Public keys from certificate files and directories of them (every regular file in a
// directory whose name does not end in "_secret"). Throws when nothing is found.
std::set<std::string> ReadAllowedKeys(const std::vector<std::string>& paths);

// What a client needs to talk CURVE to one server: its own key pair and the server's public key.
struct CurveClientKeys {
  CurveKeys client;
  std::string server_public;
};
// Reads a client's NAME_secret certificate and a server's public certificate (exit 7 on a bad file).
CurveClientKeys ReadClientKeys(const std::string& client_secret_cert, const std::string& server_cert);
// Client side: CURVE with this client's key pair, talking to the server with `server_public`.
// Call before connect.
void ApplyClientKeys(zmq::socket_t& s, const CurveClientKeys& keys);
// Server side: CURVE server with this key pair; clients are checked by a ZapHandler.
void ApplyServerKeys(zmq::socket_t& s, const CurveKeys& server);

// The ZAP handler (RFC 27) of a context: a REP socket on inproc://zeromq.zap.01 served by its
// own thread. CURVE clients whose public key is in `allowed` get status 200 and their Z85
// public key as user id (the "User-Id" property of every message they send); others get 400.
// Construct before binding the server socket; destroy before the context.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& ctx, std::set<std::string> allowed);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;
  uint64_t allowed_count() const { return allowed_n_.load(); }
  uint64_t refused_count() const { return refused_n_.load(); }

 private:
  void Run();
  zmq::socket_t sock_;
  std::set<std::string> allowed_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> allowed_n_{0}, refused_n_{0};
  std::thread thread_;
};

// Watches the handshakes of a connecting socket (a ZeroMQ socket monitor on an inproc PAIR).
// Poll() returns a one-line reason once the server refused this client: its key not allowed
// (ZAP), a security mechanism mismatch (the server wants keys and the client has none, or the
// other way round), or, with CURVE, three connections closed during the handshake in a row
// (a wrong server public key). Use from the socket's thread; destroy before the socket.
class HandshakeWatch {
 public:
  HandshakeWatch(zmq::context_t& ctx, zmq::socket_t& watched, std::string endpoint, bool curve);
  ~HandshakeWatch();
  HandshakeWatch(const HandshakeWatch&) = delete;
  HandshakeWatch& operator=(const HandshakeWatch&) = delete;
  // Takes pending events without blocking; the refusal reason once there is one.
  std::optional<std::string> Poll();

 private:
  zmq::socket_t& watched_;
  zmq::socket_t pair_;
  std::string endpoint_;
  bool curve_;
  int closed_in_handshake_ = 0;
  bool connected_ = false;
  std::optional<std::string> refused_;
};

}  // namespace k3::ipc
