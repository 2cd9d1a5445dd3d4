#include "services/server/body_limits.h"

namespace k3::server {

JsonLimits RequestJsonLimits(size_t body_bytes) {
  return JsonLimits{kMaxBodyDepth, body_bytes * kParsedBytesPerBodyByte + 64 * 1024};
}

bool BoundedBody::Add(const char* data, size_t n, Clock::time_point now) {
  if (late_ || now > deadline_) {
    late_ = true;
    return false;
  }
  if (over_ || n > limit_ - text_.size()) {
    over_ = true;
    return false;
  }
  text_.append(data, n);
  return true;
}

}  // namespace k3::server
