// k3-bench-piece-read: reads byte ranges (a checkpoint's trunk runs) through the services'
// read path, svc::ReadWorker over io::BlockReader, in pieces of --piece bytes with a ring of
// slots like the trunk reader's: up to --slots pieces are submitted at once, and a slot is
// submitted again as soon as its piece has landed (no compute in between: the disk side only).
// --piece 0 reads every range as one piece (whole layers). --drain submits the next piece
// only after the previous one landed, so the worker's queue empties at every piece boundary.
//
//   k3-bench-piece-read --range FILE:OFFSET:LENGTH ... [--io direct] [--inflight 4]
//                       [--piece BYTES] [--slots N] [--drain]
//
// Prints one JSON line: bytes, seconds, MB/s (10^6 B/s), pieces, and the most jobs the worker
// had chunks of in flight at once.
#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/io/io_internal.h"
#include "common/process_init.h"
#include "common/read_window.h"
#include "common/run_main.h"
#include "common/service/read_worker.h"

namespace {

struct Range {
  int shard = 0;
  uint64_t offset = 0, length = 0;
};

}  // namespace

int main(int argc, char** argv) {
  k3::InitProcess();
  CLI::App app{"k3-bench-piece-read: read rate of trunk runs cut into pieces, through the read worker"};
  std::vector<std::string> range_texts;
  std::string io = "direct";
  int inflight = 4, slots = 2;
  uint64_t piece = 0;
  bool drain = false;
  app.add_option("--range", range_texts, "FILE:OFFSET:LENGTH, read in order")->required();
  app.add_option("--io", io, "direct | pread | uring | mmap");
  app.add_option("--inflight", inflight, "chunks in flight (the services' --inflight)")->check(CLI::Range(1, 1024));
  app.add_option("--piece", piece, "bytes per piece (0 = each range whole)");
  app.add_option("--slots", slots, "ring slots: pieces submitted at once")->check(CLI::Range(1, 1024));
  app.add_flag("--drain", drain, "one piece at a time: the queue empties at every piece boundary");
  return k3::RunMain("k3-bench-piece-read", [&]() -> int {
    if (!k3::ParseCommandLine(app, argc, argv, "k3-bench-piece-read")) return k3::kExitOk;
    std::vector<std::string> files;
    std::map<std::string, int> shard_of;
    std::vector<Range> ranges;
    for (const auto& t : range_texts) {
      const size_t b = t.rfind(':'), a = b == std::string::npos ? b : t.rfind(':', b - 1);
      if (a == std::string::npos) throw k3::UsageError("--range wants FILE:OFFSET:LENGTH, got " + t);
      const std::string file = t.substr(0, a);
      auto [it, fresh] = shard_of.emplace(file, static_cast<int>(files.size()));
      if (fresh) files.push_back(file);
      ranges.push_back({it->second, std::stoull(t.substr(a + 1, b - a - 1)), std::stoull(t.substr(b + 1))});
    }
    // The pieces, widened to the read window like the trunk reader's runs.
    struct Piece {
      int shard;
      uint64_t begin, span;
    };
    std::vector<Piece> pieces;
    uint64_t slot_bytes = 0, bytes = 0;
    for (const auto& r : ranges) {
      const uint64_t step = piece > 0 ? piece : r.length;
      for (uint64_t at = 0; at < r.length; at += step) {
        const uint64_t b = k3::AlignDown(r.offset + at), e = k3::AlignUp(r.offset + std::min(r.length, at + step));
        pieces.push_back({r.shard, b, e - b});
        slot_bytes = std::max(slot_bytes, e - b);
        bytes += e - b;
      }
    }
    zmq::context_t ctx;
    k3::svc::ReadWorker worker(ctx, "bench-piece-read", io, files, inflight);
    for (const auto& p : pieces)  // the last window may end past EOF: clip it
      if (p.begin + p.span > worker.file_size(p.shard)) bytes -= p.begin + p.span - worker.file_size(p.shard);
    const int ring = drain ? 1 : slots;
    std::vector<k3::io::internal::AlignedBuffer> slot(static_cast<size_t>(ring));
    for (auto& s : slot) {
      s = k3::io::internal::AllocAligned(slot_bytes);
      for (uint64_t i = 0; i < slot_bytes; i += 4096) s.get()[i] = 0;  // touched, as arena pages are
    }
    std::vector<int> free_slots;
    for (int s = ring - 1; s >= 0; --s) free_slots.push_back(s);
    size_t next = 0, done = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (done < pieces.size()) {
      while (next < pieces.size() && !free_slots.empty()) {
        const Piece& p = pieces[next];
        const int s = free_slots.back();
        free_slots.pop_back();
        const uint64_t len = std::min(p.span, worker.file_size(p.shard) - p.begin);
        worker.Submit({static_cast<uint64_t>(s), p.shard, {{p.begin, len, slot[static_cast<size_t>(s)].get()}}});
        ++next;
      }
      zmq::pollitem_t item{worker.notifier().handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(1000));
      for (const auto& d : worker.TakeCompleted()) {
        if (!d.error.empty()) throw k3::RuntimeFailure(d.error);
        free_slots.push_back(static_cast<int>(d.tag));
        ++done;
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "{\"io\": \"%s\", \"inflight\": %d, \"piece\": %llu, \"slots\": %d, \"drain\": %s, \"pieces\": %zu, "
        "\"bytes\": %llu, \"seconds\": %.4f, \"mb_s\": %.1f, \"max_jobs_in_flight\": %d}\n",
        worker.backend(), inflight, static_cast<unsigned long long>(piece), ring, drain ? "true" : "false",
        pieces.size(), static_cast<unsigned long long>(bytes), s, s > 0 ? bytes / s / 1e6 : 0.0,
        worker.max_jobs_in_flight());
    return k3::kExitOk;
  });
}
