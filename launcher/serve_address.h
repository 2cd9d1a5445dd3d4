// Where a serve run answers: the URL with the port k3-server bound (its Ready stat "port", so
// `--serve 127.0.0.1:0` shows the free port it was given), for the "serving at" line and the
// --out file a script reads to find it. Pure.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace k3::launch {

// "127.0.0.1:0" and 45678 -> "http://127.0.0.1:45678"; an IPv6 host in brackets ("[::1]:0" or
// "::1:0" -> "http://[::1]:45678"). A port <= 0 (not reported) keeps the one asked for.
std::string ServeUrl(const std::string& serve, int bound_port);

// The --out file of a serve run, written once every service is ready:
// {"url", "host", "port", "model", "pid"} (the launcher's pid: what to signal to stop it).
nlohmann::json ServeReport(const std::string& serve, int bound_port, const std::string& model, int64_t pid);

}  // namespace k3::launch
