// A value or the reason there is none: what decoders and other fallible-but-expected paths
// return at process boundaries (a malformed message is an event to count, not an exception).
#pragma once
#include <optional>
#include <string>
#include <utility>

namespace k3::ipc {

template <class T>
class Result {
 public:
  static Result Ok(T v) { Result r; r.value_.emplace(std::move(v)); return r; }
  static Result Fail(std::string why) { Result r; r.error_ = std::move(why); return r; }

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  // Precondition: ok().
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  // Empty when ok().
  const std::string& error() const { return error_; }

 private:
  Result() = default;
  std::optional<T> value_;
  std::string error_;
};

}  // namespace k3::ipc
