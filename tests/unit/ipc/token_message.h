// Tests' shorthand for a plain compute Token (no logprobs).
#pragma once
#include <cstdint>

#include "common/ipc/messages.h"

namespace k3::ipc {

inline compute::Token ATokenMessage(uint64_t request_id, int32_t id, int32_t index) {
  compute::Token t;
  t.request_id = request_id;
  t.id = id;
  t.index = index;
  return t;
}

}  // namespace k3::ipc
