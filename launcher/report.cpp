#include "report.h"

#include "step_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>

#include "common/error.h"
#include "common/user_file.h"
#include "common/median.h"
#include "common/sampling_check.h"

namespace k3::launch {
namespace {

std::string Fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

}  // namespace

const char* FinishReasonName(ipc::compute::StopReason r) {
  switch (r) {
    case ipc::compute::StopReason::kLength:
      return "length";
    case ipc::compute::StopReason::kStopId:
      return "stop";
    case ipc::compute::StopReason::kInterrupted:
      return "interrupted";
    case ipc::compute::StopReason::kCancelled:
      return "cancelled";
  }
  return "unknown";  // a value this build does not know (a newer compute)
}

nlohmann::json BuildReport(const RunRecord& rec, const plan::MemoryPlan& plan, const ArenaSizes& arenas) {
  const double gen_n = static_cast<double>(std::max<size_t>(rec.generated_ids.size(), 1));
  auto stat = [&](const std::string& svc, const std::string& name) -> double {
    auto it = rec.service_stats.find(svc);
    if (it == rec.service_stats.end()) return -1;
    auto jt = it->second.find(name);
    return jt == it->second.end() ? -1 : jt->second;
  };
  const double trunk_bytes = stat("trunk-reader", "bytes_read");
  const double expert_bytes = stat("expert-fetcher", "bytes_read");
  // Hits and misses are the fetcher's (compute cannot tell them apart).
  const double hits = std::max(0.0, stat("expert-fetcher", "hits"));
  const double misses = std::max(0.0, stat("expert-fetcher", "misses"));
  // Waits while this request ran (the run_ counters; start-up waits before Generate excluded).
  const double waits = std::max(0.0, stat("compute", "run_trunk_wait_seconds")) +
                       std::max(0.0, stat("compute", "run_expert_wait_seconds"));
  nlohmann::json r;
  r["prompt_ids"] = rec.prompt_ids;
  r["generated_ids"] = rec.generated_ids;
  if (rec.generated_text) r["generated_text"] = *rec.generated_text;
  if (!rec.tokenizer_error.empty()) r["tokenizer_error"] = rec.tokenizer_error;
  r["interrupted"] = rec.interrupted;
  if (rec.interrupted) r["stop_reason"] = rec.stop_reason;
  if (rec.finish_reason) r["finish_reason"] = FinishReasonName(*rec.finish_reason);
  // A --stop text ends the run whatever compute's Done says (it may have finished first).
  if (!rec.stop_text.empty() && !rec.interrupted) {
    r["finish_reason"] = "stop";
    r["stop_text"] = rec.stop_text;
  }
  r["expert_inputs"] = rec.expert_inputs;
  if (rec.done) r["position"] = rec.done->position;
  if (rec.state_loaded_tokens >= 0) r["state_loaded_tokens"] = rec.state_loaded_tokens;
  if (!rec.state_saved.empty()) r["state_saved"] = rec.state_saved;
  r["sampling"] = SamplingJson(rec.sampling);
  if (rec.logprobs) {
    nlohmann::json lps = nlohmann::json::array();
    for (const ipc::compute::Token& t : *rec.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const ipc::compute::TopLogprob& a : t.top) top.push_back({{"id", a.id}, {"logprob", a.logprob}});
      lps.push_back({{"id", t.id}, {"logprob", t.logprob}, {"top", top}});
    }
    r["logprobs"] = lps;
  }
  if (rec.perplexity) {  // null when nothing was scored (a one-token prompt, or no Done)
    const int32_t n = rec.done ? rec.done->scored_tokens : 0;
    const double nll = n > 0 ? rec.done->nll_sum / n : 0.0;
    r["scored_tokens"] = n;
    r["nll_per_token"] = n > 0 ? nlohmann::json(nll) : nlohmann::json();
    r["perplexity"] = n > 0 ? nlohmann::json(std::exp(nll)) : nlohmann::json();
  }
  r["budget_bytes"] = plan.budget;
  r["plan_total_bytes"] = plan.total;
  r["seconds_per_token"] = rec.done ? rec.done->seconds_per_token : 0.0;
  r["prefill_seconds"] = rec.done ? rec.done->prefill_seconds : 0.0;
  r["spec_drafted"] = rec.done ? rec.done->spec_drafted : 0;  // n-gram drafts verified (--spec)
  r["spec_accepted"] = rec.done ? rec.done->spec_accepted : 0;  // of them, emitted
  // Prompt ids compute did not prefill: the sequence started from a prefix snapshot (compute's
  // cache in memory, or the prefix store on disk).
  r["cached_tokens"] = rec.done ? rec.done->cached_tokens : 0;
  r["prefix_cache_bytes"] = plan.prefix_cache;
  r["prefix_store"] = rec.prefix_store.empty() ? nlohmann::json() : nlohmann::json(rec.prefix_store);
  // Per decode step, from token arrival times at the launcher: shows the spread the mean hides.
  r["token_seconds"] = rec.token_seconds;
  if (!rec.token_seconds.empty()) r["median_token_seconds"] = Median(rec.token_seconds);
  r["run_seconds"] = rec.run_seconds;
  // What a user waits for the first id: the prompt's prefill plus one step (null: none came).
  r["first_token_seconds"] = rec.first_token_seconds ? nlohmann::json(*rec.first_token_seconds) : nlohmann::json();
  r["trunk_bytes_read"] = trunk_bytes;
  r["expert_bytes_read"] = expert_bytes;
  r["trunk_bytes_per_token"] = trunk_bytes >= 0 ? trunk_bytes / gen_n : -1.0;
  r["expert_bytes_per_token"] = expert_bytes >= 0 ? expert_bytes / gen_n : -1.0;
  r["expert_hit_rate"] = hits + misses > 0 ? hits / (hits + misses) : -1.0;
  r["compute_wait_seconds"] = waits;
  r["io_share"] = rec.run_seconds > 0 ? waits / rec.run_seconds : 0.0;
  // The coded trunk (docs/pipeline.md "Coded trunk"): coded bytes read and what they decoded
  // to, the reads' rate against the disk's raw rate (a --disk-rate probe), and what bound a step.
  const double coded = std::max(0.0, stat("trunk-reader", "coded_bytes_read"));
  const double decoded = std::max(0.0, stat("trunk-reader", "decoded_bytes"));
  const double decode_s = std::max(0.0, stat("trunk-reader", "decode_seconds"));
  const double trunk_read_s = std::max(0.0, stat("trunk-reader", "read_seconds"));
  const double expert_mbps = stat("expert-fetcher", "read_mb_s");
  const double expert_read_s = expert_mbps > 0 && expert_bytes > 0 ? expert_bytes / (expert_mbps * 1e6) : 0.0;
  r["trunk_coded_bytes_per_token"] = coded / gen_n;
  r["trunk_decoded_bytes_per_token"] = decoded / gen_n;
  r["decode_seconds_per_token"] = decode_s / gen_n;
  r["digest_check_seconds"] = std::max(0.0, stat("trunk-reader", "check_seconds"));  // once per coded run
  const double read_bytes = std::max(0.0, trunk_bytes) + std::max(0.0, expert_bytes);
  r["read_mb_s"] = trunk_read_s + expert_read_s > 0 ? read_bytes / (trunk_read_s + expert_read_s) / 1e6 : 0.0;
  r["disk_raw_mb_s"] = rec.disk_raw_rate > 0 ? nlohmann::json(rec.disk_raw_rate / 1e6) : nlohmann::json();
  // Decode steps only (the prompt pass also waits for start-up reads): overlap per token.
  const double steps = stat("compute", "decode_steps");
  const double trunk_wait_tok = steps > 0 ? std::max(0.0, stat("compute", "decode_trunk_wait_seconds")) / steps : 0.0;
  const double expert_wait_tok = steps > 0 ? std::max(0.0, stat("compute", "decode_expert_wait_seconds")) / steps : 0.0;
  r["trunk_wait_seconds_per_token"] = trunk_wait_tok;
  r["expert_wait_seconds_per_token"] = expert_wait_tok;
  r["compute_wait_seconds_per_token"] = trunk_wait_tok + expert_wait_tok;
  r["step_bound"] = StepBound({rec.done ? rec.done->seconds_per_token : 0.0, trunk_wait_tok + expert_wait_tok,
                               (trunk_read_s + expert_read_s) / gen_n, decode_s / gen_n});
  // Next-layer guesses: how many of the routed experts they named, and the fetcher's reads.
  r["prefetch_hints"] = rec.prefetch_hints;
  r["hint_recall"] = stat("compute", "hint_recall");
  r["prefetch_reads"] = stat("expert-fetcher", "prefetch_reads");
  r["prefetch_used"] = stat("expert-fetcher", "prefetch_used");
  // Per expert server: the fetcher's server_<i>_* Stats under the endpoint they belong to.
  if (!rec.expert_servers.empty()) {
    nlohmann::json servers = nlohmann::json::array();
    for (size_t i = 0; i < rec.expert_servers.size(); ++i) {
      const std::string p = "server_" + std::to_string(i) + "_";
      const double bytes = stat("expert-fetcher", p + "bytes"), secs = stat("expert-fetcher", p + "seconds");
      servers.push_back({{"endpoint", rec.expert_servers[i]},
                         {"experts", stat("expert-fetcher", p + "experts")},
                         {"bytes", bytes},
                         {"seconds", secs},
                         {"mb_s", bytes >= 0 && secs > 0 ? bytes / secs / 1e6 : 0.0},
                         {"failures", stat("expert-fetcher", p + "failures")},
                         {"resends", stat("expert-fetcher", p + "resends")},
                         {"moved", stat("expert-fetcher", p + "moved")},
                         {"dropped", stat("expert-fetcher", p + "dropped") > 0}});
    }
    r["expert_servers"] = servers;
  }
  r["membw_probe_passes"] = stat("compute", "membw_probe_passes");
  r["membw_probe_median_gbs"] = stat("compute", "membw_probe_median_gbs");
  r["median_step_seconds"] = stat("compute", "median_step_seconds");
  int64_t total = 0;
  nlohmann::json mem = nlohmann::json::object();
  for (const auto& [name, pm] : rec.peak) {
    mem[name] = {{"vm_hwm_bytes", pm.vm_hwm}, {"rss_shmem_bytes", pm.rss_shmem}};
    if (pm.vm_hwm > 0) total += pm.vm_hwm - std::max<int64_t>(pm.rss_shmem, 0);
  }
  total += arenas.total();  // shm counted once, at its full size
  r["peak_memory"] = mem;
  r["peak_memory_total_bytes"] = total;
  r["service_stats"] = rec.service_stats;
  r["restarts"] = rec.restarts;
  r["rejected_messages"] = rec.rejected_messages;
  return r;
}

std::vector<std::string> SummaryLines(const nlohmann::json& r, int64_t budget) {
  auto d = [&](const char* k) { return r.contains(k) ? r[k].get<double>() : 0.0; };
  std::vector<std::string> out;
  const std::string finish = r.contains("finish_reason") ? " (ended: " + r["finish_reason"].get<std::string>() + ")" : "";
  const std::string first = r.contains("first_token_seconds") && r["first_token_seconds"].is_number()
                                ? Fmt(", first token %.3f s", d("first_token_seconds"))
                                : "";
  out.push_back(Fmt("[launch] %zu tokens%s%s, %.4f s/token, prefill %.3f s%s", r["generated_ids"].size(),
                    finish.c_str(), first.c_str(), d("seconds_per_token"), d("prefill_seconds"),
                    r.value("interrupted", false) ? " (interrupted)" : ""));
  if (r.contains("perplexity") && r["perplexity"].is_number())
    out.push_back(Fmt("[launch] prompt perplexity %.4f (%.4f nats/token over %d tokens)", d("perplexity"),
                      d("nll_per_token"), r["scored_tokens"].get<int>()));
  out.push_back(Fmt("[launch] trunk %.0f B/token, experts %.0f B/token, expert hit rate %.3f, compute waited %.3f s "
                    "(%.0f%% of the run)",
                    d("trunk_bytes_per_token"), d("expert_bytes_per_token"), d("expert_hit_rate"),
                    d("compute_wait_seconds"), 100 * d("io_share")));
  out.push_back(Fmt("[launch] compute waited on I/O %.4f s/token while decoding (trunk %.4f, experts %.4f) of %.4f s/token",
                    d("compute_wait_seconds_per_token"), d("trunk_wait_seconds_per_token"),
                    d("expert_wait_seconds_per_token"), d("seconds_per_token")));
  if (d("trunk_coded_bytes_per_token") > 0)
    out.push_back(Fmt("[launch] coded trunk: %.0f B/token read, decoded to %.0f B/token in %.4f s/token (digests "
                      "checked on first read: %.2f s)",
                      d("trunk_coded_bytes_per_token"), d("trunk_decoded_bytes_per_token"), d("decode_seconds_per_token"),
                      d("digest_check_seconds")));
  const std::string raw = r.contains("disk_raw_mb_s") && r["disk_raw_mb_s"].is_number()
                              ? Fmt(" (raw O_DIRECT probe %.0f MB/s: %.2fx)", d("disk_raw_mb_s"), d("read_mb_s") / d("disk_raw_mb_s"))
                              : std::string(" (no disk probe: --disk-rate probe)");
  out.push_back(Fmt("[launch] reads %.0f MB/s%s; the step was bound by %s", d("read_mb_s"), raw.c_str(),
                    r.value("step_bound", std::string("compute")).c_str()));
  const bool store = r.contains("prefix_store") && r["prefix_store"].is_string();
  if (d("prefix_cache_bytes") > 0 || d("cached_tokens") > 0 || store)
    out.push_back(Fmt("[launch] %.0f prompt ids from a prefix snapshot (not prefilled); prefix cache %s, prefix store %s",
                      d("cached_tokens"), k3::FormatBytes(static_cast<int64_t>(d("prefix_cache_bytes"))).c_str(),
                      store ? r["prefix_store"].get<std::string>().c_str() : "off"));
  if (d("spec_drafted") > 0)
    out.push_back(Fmt("[launch] speculation: %.0f drafts verified, %.0f accepted (%.0f%%)", d("spec_drafted"),
                      d("spec_accepted"), 100 * d("spec_accepted") / d("spec_drafted")));
  if (r.value("prefetch_hints", false))
    out.push_back(Fmt("[launch] next-layer expert hints: recall %.3f, %.0f experts read ahead, %.0f of them then requested",
                      d("hint_recall"), d("prefetch_reads"), d("prefetch_used")));
  if (r.contains("expert_servers"))
    for (const auto& s : r["expert_servers"])
      out.push_back(Fmt("[launch] expert server %s: %.0f experts, %s in %.2f s (%.1f MB/s), %.0f failures%s",
                        s["endpoint"].get<std::string>().c_str(), s["experts"].get<double>(),
                        k3::FormatBytes(static_cast<int64_t>(std::max(0.0, s["bytes"].get<double>()))).c_str(),
                        std::max(0.0, s["seconds"].get<double>()), s["mb_s"].get<double>(),
                        std::max(0.0, s["failures"].get<double>()), s["dropped"].get<bool>() ? ", dropped" : ""));
  if (d("membw_probe_passes") > 0)
    out.push_back(Fmt("[launch] read-bandwidth probe over the resident weights: median %.1f GB/s; median decode step "
                      "%.4f s (compute's clock, probes excluded)",
                      d("membw_probe_median_gbs"), d("median_step_seconds")));
  if (r.contains("state_loaded_tokens") || r.contains("state_saved"))
    out.push_back(Fmt("[launch] state: %s%s%s; sequence now %lld tokens",
                      r.contains("state_loaded_tokens")
                          ? ("continued " + std::to_string(r["state_loaded_tokens"].get<int64_t>()) + " tokens").c_str()
                          : "new",
                      r.contains("state_saved") ? ", saved to " : "",
                      r.contains("state_saved") ? r["state_saved"].get<std::string>().c_str() : "",
                      static_cast<long long>(r.value("position", int64_t{0}))));
  for (const auto& [name, pm] : r["peak_memory"].items())
    out.push_back(Fmt("[launch] peak %-15s %s (shm %s)", name.c_str(),
                      k3::FormatBytes(pm["vm_hwm_bytes"].get<int64_t>()).c_str(),
                      k3::FormatBytes(pm["rss_shmem_bytes"].get<int64_t>()).c_str()));
  out.push_back(Fmt("[launch] peak total (shm once) %s of budget %s",
                    k3::FormatBytes(r["peak_memory_total_bytes"].get<int64_t>()).c_str(),
                    k3::FormatBytes(budget).c_str()));
  return out;
}

void WriteReportFile(const std::string& path, const nlohmann::json& report) {
  // generated_text may hold ill-formed UTF-8 (any ids can be generated): U+FFFD in JSON.
  WriteFileAtomically(path, report.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "--out",
                      kExitOutput);
}

}  // namespace k3::launch
