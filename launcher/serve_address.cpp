#include "launcher/serve_address.h"

namespace k3::launch {
namespace {

// HOST:PORT (CheckOptions made sure of the port) -> host without brackets, port.
std::pair<std::string, int> Split(const std::string& serve) {
  const size_t colon = serve.rfind(':');
  std::string host = colon == std::string::npos ? serve : serve.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const int port = colon == std::string::npos ? 0 : std::atoi(serve.c_str() + colon + 1);
  return {host, port};
}

}  // namespace

std::string ServeUrl(const std::string& serve, int bound_port) {
  const auto [host, asked] = Split(serve);
  const int port = bound_port > 0 ? bound_port : asked;
  return "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

nlohmann::json ServeReport(const std::string& serve, int bound_port, const std::string& model, int64_t pid) {
  const auto [host, asked] = Split(serve);
  return {{"url", ServeUrl(serve, bound_port)},
          {"host", host},
          {"port", bound_port > 0 ? bound_port : asked},
          {"model", model},
          {"pid", pid}};
}

}  // namespace k3::launch
