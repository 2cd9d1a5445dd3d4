// `k3-tokenizer serve`: the process shell of the tokenizer pipeline service (sockets, control
// link, stop signals; docs/pipeline.md, "k3-tokenizer serve"). The request -> reply logic is
// TokenizerService in service_core.h.
#pragma once
#include <string>

namespace k3::tok {

struct ServeOptions {
  std::string vocab;    // tokenizer directory
  std::string control;  // launcher control endpoint (connect)
  std::string bind;     // tokenizer endpoint (bind, ROUTER)
};

// The shared service lifecycle (svc::RunService): Hello → load the vocabulary → bind → Ready →
// serve until Shutdown (exit 0) or SIGTERM/SIGINT/SIGHUP (exit 5) → stats line + control Stats.
// A fatal error is sent as Dead and thrown on, for main()'s RunMain to print and return.
int Serve(const ServeOptions& o);

}  // namespace k3::tok
