// The HTTP errors the engine ends or refuses requests with (docs/server.md).
#pragma once
#include <string>

#include "services/server/job.h"

namespace k3::server {

inline HttpError MakeHttpError(int status, std::string message, std::string type, std::string code = {}) {
  return HttpError{status, std::move(message), std::move(type), std::move(code)};
}
inline HttpError ShuttingDown() { return MakeHttpError(503, "the server is shutting down", "server_error", "unavailable"); }
inline HttpError ClientGone() { return MakeHttpError(499, "the client went away", "invalid_request_error"); }

}  // namespace k3::server
