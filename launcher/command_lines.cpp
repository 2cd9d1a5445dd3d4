#include "command_lines.h"

#include <cstdio>
#include <filesystem>

#include "common/ipc/shm_arena.h"

namespace k3::launch {
namespace {

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

RunEndpoints EndpointsIn(const std::string& ipc_name, const std::string& bin_dir) {
  RunEndpoints e;
  e.bin_dir = bin_dir;
  e.control = "ipc://" + ipc_name + "/control";
  e.trunk = "ipc://" + ipc_name + "/trunk";
  e.experts = "ipc://" + ipc_name + "/experts";
  e.compute = "ipc://" + ipc_name + "/compute";
  e.tokenizer = "ipc://" + ipc_name + "/tokenizer";
  return e;
}

std::vector<ServiceCommand> ServiceCommandLines(const LaunchOptions& opt, const ModelLayout& m,
                                                const plan::MemoryPlan& p, const RunEndpoints& ep,
                                                const std::string& tokenizer_dir) {
  const std::string inflight = std::to_string(opt.inflight);
  // What the plan streams, told to both ends: lm_head chunks through the ring, embedding
  // rows through the embed-window arena (docs/pipeline.md "Streamed embedding and lm_head").
  std::vector<std::string> head_flags;
  if (!p.lm_head_resident) head_flags.push_back("--stream-lm-head");
  if (!p.embed_resident) head_flags.insert(head_flags.end(), {"--embed-arena", ep.embed_arena});

  std::vector<ServiceCommand> out;
  std::vector<std::string> t = {ep.bin_dir + "/k3-trunk-reader", "--model", opt.model, "--control", ep.control,
                                "--bind", ep.trunk, "--pinned-arena", ep.pinned_arena, "--ring-arena",
                                ep.ring_arena, "--pin", Join(p.pinned_layers), "--io", opt.io, "--inflight",
                                inflight};
  t.insert(t.end(), head_flags.begin(), head_flags.end());
  if (!opt.coded_trunk.empty()) t.insert(t.end(), {"--coded-trunk", opt.coded_trunk});
  out.push_back({"trunk-reader", t, true});

  std::vector<std::string> x = {ep.bin_dir + "/k3-expert-fetcher", "--model", opt.model, "--control", ep.control,
                                "--bind", ep.experts, "--arena", ep.experts_arena, "--io", opt.io,
                                "--inflight", inflight};
  if (!opt.dump_cache_trace.empty()) x.insert(x.end(), {"--dump-cache-trace", opt.dump_cache_trace});
  if (!opt.expert_server.empty()) {
    char timeout[32];
    std::snprintf(timeout, sizeof timeout, "%g", opt.expert_server_timeout);
    for (const std::string& server : opt.expert_server) x.insert(x.end(), {"--remote", server});
    x.insert(x.end(), {"--remote-timeout", timeout});
    if (!opt.client_key.empty()) {  // CheckOptions: one server key for all, or one per server
      for (const std::string& cert : opt.expert_server_key) x.insert(x.end(), {"--remote-server-key", cert});
      x.insert(x.end(), {"--remote-client-key", opt.client_key});
    }
  }
  if (!opt.manifest.empty()) x.insert(x.end(), {"--manifest", opt.manifest});
  if (opt.no_verify) x.push_back("--no-verify");
  // Every expert has a slot: the fetcher reads them all ahead (nothing is ever evicted).
  if (AllExpertsResident(m, p)) x.push_back("--warm");
  out.push_back({"expert-fetcher", x, true});

  std::vector<std::string> c = {ep.bin_dir + "/k3-compute", "--pipeline", "--model", opt.model,
                                "--control", ep.control, "--endpoint", ep.compute, "--trunk", ep.trunk,
                                "--experts", ep.experts, "--pinned-arena", ep.pinned_arena,
                                "--ring-arena", ep.ring_arena, "--experts-arena", ep.experts_arena};
  if (opt.threads > 0) c.insert(c.end(), {"--threads", std::to_string(opt.threads)});
  c.insert(c.end(), {"--expert-inputs", opt.expert_inputs});
  if (opt.probe_membw) c.push_back("--probe-membw");
  if (opt.max_batch > 1) c.insert(c.end(), {"--max-batch", std::to_string(opt.max_batch)});
  if (HintsOffReason(opt, m, p) == nullptr) c.push_back("--prefetch-hints");
  if (!opt.dump_logits.empty()) c.insert(c.end(), {"--dump-logits", opt.dump_logits});
  if (p.prefix_cache > 0) c.insert(c.end(), {"--prefix-cache", std::to_string(p.prefix_cache)});
  if (!opt.prefix_store.empty())  // absolute: compute's working directory need not be ours
    c.insert(c.end(), {"--prefix-store", std::filesystem::absolute(opt.prefix_store).string(), "--prefix-store-size",
                       std::to_string(plan::ParsePrefixCache(opt.prefix_store_size, "prefix_store_size", false)),
                       "--prefix-store-interval", std::to_string(opt.prefix_store_interval)});
  c.insert(c.end(), {"--prefill-chunk", std::to_string(p.prefill_chunk)});  // the scratch the plan counted
  // Serving: constrained requests (response_format) mask with the vocabulary's bytes.
  if (!opt.serve.empty() && !tokenizer_dir.empty())
    c.insert(c.end(), {"--tokenizer", std::filesystem::absolute(tokenizer_dir).string()});
  c.insert(c.end(), head_flags.begin(), head_flags.end());
  out.push_back({"compute", c, false});

  if (!tokenizer_dir.empty())
    out.push_back({"tokenizer",
                   {ep.bin_dir + "/k3-tokenizer", "serve", "--vocab", tokenizer_dir, "--control", ep.control,
                    "--bind", ep.tokenizer},
                   true});
  return out;
}

std::string ServedModelName(const LaunchOptions& opt) {
  std::string name = opt.served_model_name;
  if (name.empty()) name = std::filesystem::path(opt.model).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(opt.model).lexically_normal().parent_path().filename().string();
  return name;
}

ServiceCommand ServerCommandLine(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                                 const RunEndpoints& ep, const std::vector<int32_t>& stop_ids, const std::vector<std::string>& wait_for) {
  std::vector<int> id_list(stop_ids.begin(), stop_ids.end());
  const std::string ids = Join(id_list);
  std::string services;
  for (const std::string& s : wait_for) {
    if (!services.empty()) services.push_back(',');
    services.append(s);
  }
  const std::string name = ServedModelName(opt);
  const int64_t threads = plan::ServeHttpThreads(opt.http_threads, opt.max_batch, opt.queue_size);
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", v);
    return std::string(b);
  };
  const ipc::compute::Sampling& s = opt.sampling;
  std::vector<std::string> a = {ep.bin_dir + "/k3-server", "--control", ep.control, "--compute", ep.compute,
                                "--tokenizer", ep.tokenizer, "--listen", opt.serve, "--model-name", name,
                                "--vocab-size", std::to_string(m.cfg.vocab_size), "--context", std::to_string(opt.context),
                                "--max-batch", std::to_string(opt.max_batch), "--queue-size", std::to_string(opt.queue_size),
                                "--threads", std::to_string(threads), "--max-body-bytes", std::to_string(opt.max_body_bytes),
                                "--max-tokens-default", std::to_string(opt.max_tokens_default),
                                "--max-tokens-limit", std::to_string(opt.max_tokens_limit),
                                "--tokenizer-timeout", num(opt.tokenizer_timeout),
                                "--compute-timeout", num(opt.compute_timeout), "--queue-timeout", num(opt.queue_timeout),
                                "--run-timeout", num(opt.run_timeout),
                                "--prefill-chunk", std::to_string(p.prefill_chunk), "--wait-for", services,
                                "--temperature", num(s.temperature), "--top-k", std::to_string(s.top_k),
                                "--top-p", num(s.top_p), "--min-p", num(s.min_p), "--repeat-penalty", num(s.repeat_penalty),
                                "--repeat-last-n", std::to_string(s.repeat_last_n),
                                "--presence-penalty", num(s.presence_penalty), "--frequency-penalty", num(s.frequency_penalty)};
  if (!ids.empty()) a.insert(a.end(), {"--stop-ids", ids});
  if (opt.insecure) a.push_back("--insecure");
  if (!opt.allowed_hosts.empty()) {
    std::string hosts;
    for (const std::string& h : opt.allowed_hosts) hosts += (hosts.empty() ? "" : ",") + h;
    a.insert(a.end(), {"--allowed-hosts", hosts});
  }
  if (opt.no_think) a.push_back("--no-think");
  if (opt.thinking_effort_given) a.insert(a.end(), {"--thinking-effort", opt.thinking_effort});
  // The API key goes through the environment (K3_API_KEY, set by the launcher), not argv: other
  // users can read a command line, not an environment.
  return {"server", a, false};
}

bool AllExpertsResident(const ModelLayout& m, const plan::MemoryPlan& p) {
  return p.expert_slots >= m.cfg.routed_expert_count();
}

// Guesses pay off when experts are read during the run (not all resident), the arena has room
// for a second layer's experts next to the current one's (the fetcher checks too), and the
// whole trunk is pinned. With trunk layers streaming, the disk is never idle between expert
// demands and a wrong guess takes bandwidth the trunk needs: measured 2.5% slower with 2 of 4
// layers pinned, 10% faster with all pinned (docs/benchmarks.md).
const char* HintsOffReason(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p) {
  if (!opt.prefetch_hints) return "switched off";
  if (AllExpertsResident(m, p)) return "every expert has a slot";
  if (p.expert_slots < 2 * m.cfg.top_k) return "fewer than 2 x top_k expert slots";
  if (static_cast<int64_t>(p.pinned_layers.size()) < m.cfg.num_layers) return "trunk layers stream";
  return nullptr;
}

}  // namespace k3::launch
