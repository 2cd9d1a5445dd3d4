// Arenas, the launcher's sockets and starting the services.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/error.h"
#include "common/ipc/shm_arena.h"
#include "launcher/runner.h"

namespace k3::launch {
namespace fs = std::filesystem;

namespace {

std::string SelfDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw RuntimeFailure("cannot locate k3-launch: " + ec.message());
  return exe.parent_path().string();
}

}  // namespace

// The arenas (nothing of them outlives the run, run_resources.h), the control and compute
// ROUTERs, the tokenizer client; returns every endpoint the services are given.
RunEndpoints Runner::OpenSockets() {
  ipc::CleanupDeadLaunchers();  // /dev/shm names left by k3 versions before memfd arenas
  res_.emplace(SizeArenas(m_, plan_));
  RunEndpoints ep = EndpointsIn(res_->ipc_name(), SelfDir());
  ep.pinned_arena = res_->pinned.Spec();
  ep.ring_arena = res_->ring.Spec();
  ep.experts_arena = res_->experts.Spec();
  if (res_->embed_window) ep.embed_arena = res_->embed_window->Spec();

  control_.emplace(ctx_, zmq::socket_type::router);
  compute_.emplace(ctx_, zmq::socket_type::router);
  for (auto* s : {&*control_, &*compute_}) {
    s->set(zmq::sockopt::router_mandatory, 1);
    s->set(zmq::sockopt::router_handover, 1);  // a restarted service takes over its identity
    s->set(zmq::sockopt::linger, 0);
  }
  ipc::BindPrivate(*control_, ep.control);
  if (!Serving()) ipc::BindPrivate(*compute_, ep.compute);  // serving: k3-server binds it, compute's client
  if (!in_.tokenizer_dir.empty()) tok_.emplace(ctx_, ep.tokenizer);
  tokenizer_endpoint_ = ep.tokenizer;

  return ep;
}

// With `tokenizer_only` only the tokenizer starts (a text prompt is encoded and its length
// checked before any weight service starts pinning); StartRest starts the others.
void Runner::Spawn(const RunEndpoints& ep, bool tokenizer_only) {
  for (ServiceCommand& c : ServiceCommandLines(opt_, m_, plan_, ep, in_.tokenizer_dir)) {
    Service s{c.name, std::move(c.argv), c.restartable};
    // Every service's stderr comes through the launcher, a whole line at a time (stderr_lines.h).
    s.capture_stderr = true;
    sup_.Add(std::move(s));
  }
  if (Serving()) {
    std::vector<std::string> others;
    for (const Service& s : sup_.services()) others.push_back(s.name);
    ServiceCommand c = ServerCommandLine(opt_, m_, plan_, ep, stop_ids_, others);
    Service s{c.name, std::move(c.argv), c.restartable};
    // k3-server alone reads the key, from its environment, which other users cannot read (argv
    // they can); no other service gets it (supervisor.h kChildOnlyEnv).
    if (!opt_.api_key.empty()) s.env.push_back("K3_API_KEY=" + opt_.api_key);
    s.capture_stderr = true;
    sup_.Add(std::move(s));
  }
  for (const Service& s : sup_.services())
    if (::access(s.argv[0].c_str(), X_OK) != 0)
      throw RuntimeFailure("cannot start " + s.name + ": " + s.argv[0] + " is missing");
  for (Service& s : sup_.services()) s.inherit_fds = res_->FdsNamedIn(s.argv);
  for (size_t i = 0; i < sup_.services().size(); ++i)
    if (!tokenizer_only || sup_.services()[i].name == "tokenizer") sup_.Start(i);
}

void Runner::StartRest() {
  for (size_t i = 0; i < sup_.services().size(); ++i)
    if (sup_.services()[i].pid <= 0 && !sup_.services()[i].ready) sup_.Start(i);
}

}  // namespace k3::launch
