// The argv of every service k3-launch spawns, as a pure function of the options, the model
// layout, the memory plan and where this run's endpoints and arenas are. This is the
// "Command lines" contract of docs/pipeline.md; nothing here touches processes or sockets.
#pragma once
#include <string>
#include <vector>

#include "common/plan/memory_plan.h"
#include "model_layout.h"
#include "options.h"

namespace k3::launch {

// Where one run's services meet: endpoints (ipc://, tcp://) and the arena names the services
// attach to (whatever their --*-arena flags accept). Filled in by the run, so changing how
// arenas and sockets are made does not touch the command lines.
struct RunEndpoints {
  std::string bin_dir;  // directory holding the service binaries
  std::string control, trunk, experts, compute, tokenizer;
  std::string pinned_arena, ring_arena, experts_arena, embed_arena;
};

// The socket endpoints "ipc://<ipc_name>/<service>" (ipc_name: "@k3-<pid>-<random>", the abstract
// namespace, launcher/run_resources.h). The arena fields stay empty: the caller fills them with
// the arenas' specs ("fd:N").
RunEndpoints EndpointsIn(const std::string& ipc_name, const std::string& bin_dir);

struct ServiceCommand {
  std::string name;               // "trunk-reader", "expert-fetcher", "compute", "tokenizer"
  std::vector<std::string> argv;  // argv[0] is the executable path
  bool restartable = false;       // weight services and the tokenizer come back after a crash
};

// In start order: trunk-reader, expert-fetcher, compute, then tokenizer when
// `tokenizer_dir` is non-empty.
std::vector<ServiceCommand> ServiceCommandLines(const LaunchOptions& opt, const ModelLayout& m,
                                                const plan::MemoryPlan& p, const RunEndpoints& ep,
                                                const std::string& tokenizer_dir);

// k3-server's argv for --serve (docs/server.md): it binds `ep.compute` (compute's client in
// serve mode), asks the tokenizer at `ep.tokenizer`, and /health waits for `wait_for`.
// `stop_ids`: the model's end ids and --stop-ids, sorted.
ServiceCommand ServerCommandLine(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                                 const RunEndpoints& ep, const std::vector<int32_t>& stop_ids, const std::vector<std::string>& wait_for);

// The model id k3-server serves: served_model_name, else the model directory's name.
std::string ServedModelName(const LaunchOptions& opt);

// Every routed expert has a slot: the fetcher reads them all ahead (--warm).
bool AllExpertsResident(const ModelLayout& m, const plan::MemoryPlan& p);
// Why compute will not send next-layer expert hints (docs/pipeline.md "Next-layer expert
// hints") under this plan, or null when it will.
const char* HintsOffReason(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p);

}  // namespace k3::launch
