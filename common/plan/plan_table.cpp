#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/plan/memory_plan.h"

namespace k3::plan {

std::vector<Region> MemoryPlan::regions() const {
  const std::string globals = "globals " + FormatBytes(globals_bytes) +
                              (embed_resident ? " incl. embedding" : "") + (lm_head_resident ? " incl. lm_head" : "");
  std::vector<Region> r = {
      {"compute", "kda-state", kda_state, "recurrent + conv state, fp32"},
      {"compute", "mla-cache", mla_cache, "latent cache, fp32"},
      {"compute", "scratch", scratch,
       "activations: prefill chunk " + std::to_string(prefill_chunk) + " x " + std::to_string(scratch_row / 1024) +
           " KiB + tiles"},
      {"tokenizer", "tables", tokenizer, ""},
      {"all", "process-overhead", overhead, std::to_string(processes) + " processes"},
      {"shm", "trunk-pinned", pinned_bytes, std::to_string(pinned_layers.size()) + " layers + " + globals},
      {"shm", "trunk-ring", ring_bytes,
       std::to_string(ring_slots) + " slots x " + FormatBytes(ring_slot_bytes) +
           (trunk_pieced ? "; layers in pieces" : "") +
           (lm_head_resident ? "" : "; lm_head in " + std::to_string(lm_head_chunks) + " chunks of " +
                                        std::to_string(lm_head_chunk_rows) + " rows")},
      {"shm", "embed-window", embed_window_bytes,
       embed_resident ? "embedding resident in trunk-pinned" : std::to_string(embed_window_rows) + " rows"},
      {"shm", "experts", expert_arena_bytes,
       std::to_string(expert_slots) + " slots x " + FormatBytes(expert_slot_bytes)},
  };
  if (spec_rollback > 0)
    r.insert(r.begin() + 2, {"compute", "spec-rollback", spec_rollback, "speculation: state before a verify pass + its inputs"});
  if (batch_state > 0)
    r.insert(r.begin() + 2, {"compute", "batch-state", batch_state, "KDA state + MLA cache + a decode row per sequence beyond the first"});
  if (prefix_cache > 0 || prefix_cache_auto) {
    char note[160];
    std::snprintf(note, sizeof note, "prefix snapshots%s; %.1f of a full-context one (%s)", prefix_cache_auto ? " (auto)" : "",
                  prefix_snapshot_bytes > 0 ? static_cast<double>(prefix_cache) / static_cast<double>(prefix_snapshot_bytes) : 0.0,
                  FormatBytes(prefix_snapshot_bytes).c_str());
    r.insert(r.begin() + 2 + (spec_rollback > 0) + (batch_state > 0), {"compute", "prefix-cache", prefix_cache, note});
  }
  if (serving) {
    // After the tokenizer's tables, before the process overhead.
    const std::vector<Region> s = {
        {"server", "threads", server.thread_bytes,
         std::to_string(server.threads) + " threads (" + std::to_string(server_http_threads) + " for connections)"},
        {"server", "connections", server.connections,
         std::to_string(server_http_threads) + " bodies of up to " + FormatBytes(server_max_body) + " being parsed"},
        {"server", "requests", server.requests, std::to_string(server.held_requests) + " requests held, full context"},
        {"server", "decode-cache", server.decode_cache, "each id's text, once"},
    };
    const auto all = std::find_if(r.begin(), r.end(), [](const Region& x) { return x.process == "all"; });
    r.insert(all, s.begin(), s.end());
  }
  if (remote_frames > 0)
    r.push_back({"fetcher", "remote-frames", remote_frames,
                 remote_servers > 1 ? "experts in flight from " + std::to_string(remote_servers) + " expert servers"
                                    : "experts in flight from the expert server"});
  return r;
}

std::string MemoryPlan::Table() const {
  std::ostringstream out;
  char line[200];
  std::snprintf(line, sizeof line, "%-10s %-17s %12s  %s\n", "process", "region", "bytes", "note");
  out << line;
  for (const Region& r : regions()) {
    std::snprintf(line, sizeof line, "%-10s %-17s %12s  %s\n", r.process.c_str(), r.region.c_str(),
                  FormatBytes(r.bytes).c_str(), r.note.c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "%-28s %12s  (budget %s, floor %s)\n", "total", FormatBytes(total).c_str(),
                FormatBytes(budget).c_str(), FormatBytes(floor).c_str());
  out << line;
  return out.str();
}

}  // namespace k3::plan
