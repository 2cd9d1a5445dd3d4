// k3-bench-hash: the digests the expert manifest could use, per core, on one buffer the size
// of a real K3 routed expert (17,547,264 bytes): OpenSSL SHA-256 (what common/manifest uses,
// with the CPU's SHA extensions when it has them), libsodium BLAKE2b and SHA-256, OpenSSL
// BLAKE2b-512 and SHA-512, against a memcpy of the same bytes. Median of --repeats passes.
//
//     k3-bench-hash [--repeats 15] [--bytes 17547264]
#include <CLI/CLI.hpp>
#include <openssl/evp.h>
#include <sodium.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/median.h"
#include "common/manifest.h"
#include "common/run_main.h"

namespace {

int Run(int argc, char** argv) {
  int repeats = 15;
  size_t bytes = 17547264;
  CLI::App app{"k3-bench-hash: digest throughput per core on one expert-sized buffer"};
  app.add_option("--repeats", repeats, "passes per digest (median)")->check(CLI::Range(1, 1000));
  app.add_option("--bytes", bytes, "buffer size")->check(CLI::Range(size_t{1}, size_t{1} << 32));
  if (!k3::ParseCommandLine(app, argc, argv, "k3-bench-hash")) return k3::kExitOk;
  if (sodium_init() < 0) {
    std::fprintf(stderr, "k3-bench-hash: sodium_init failed\n");
    return 1;
  }
  std::vector<uint8_t> buf(bytes), dst(bytes);
  for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  unsigned char out[64];
  auto evp = [&](const EVP_MD* md) {
    unsigned int n = 0;
    EVP_Digest(buf.data(), buf.size(), out, &n, md, nullptr);
  };
  const std::vector<std::pair<const char*, std::function<void()>>> cases = {
      {"memcpy (reference)", [&] { std::memcpy(dst.data(), buf.data(), bytes); }},
      {"k3 expert digest (OpenSSL SHA-256, 4 MiB chunks)", [&] { k3::ExpertDigestOf(buf.data(), bytes); }},
      {"OpenSSL SHA-256", [&] { evp(EVP_sha256()); }},
      {"OpenSSL SHA-512", [&] { evp(EVP_sha512()); }},
      {"OpenSSL BLAKE2b-512", [&] { evp(EVP_blake2b512()); }},
      {"libsodium BLAKE2b-256 (crypto_generichash)", [&] { crypto_generichash(out, 32, buf.data(), bytes, nullptr, 0); }},
      {"libsodium SHA-256 (crypto_hash_sha256)", [&] { crypto_hash_sha256(out, buf.data(), bytes); }},
  };
  std::printf("%zu bytes, median of %d passes, one thread\n", bytes, repeats);
  for (const auto& [name, fn] : cases) {
    std::vector<double> s;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double med = k3::Median(s);
    std::printf("%-50s %7.2f GB/s  %6.2f ms\n", name, static_cast<double>(bytes) / med / 1e9, med * 1e3);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return k3::RunMain("k3-bench-hash", [&] { return Run(argc, argv); });
}
