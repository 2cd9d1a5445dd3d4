// A secret a user keeps in a file so that it stays off command lines (k3-launch's
// api_key_file): read with user_file.h's rules (a regular file, at most kMaxSecretFileBytes,
// never blocking), trusted only when no one else could have read or changed it (owned by this
// user or root, no permission bit for group or others, as ssh asks of a private key), and one
// line: the secret in printable ASCII without spaces, optionally ended by one newline.
// Anything else is Error(kExitBadInput, "<what> <path>: <reason>").
#pragma once
#include <string>
#include <string_view>

namespace k3 {

std::string ReadSecretFile(const std::string& path, std::string_view what);

// The reason `text` is not one secret line ("" when it is); pure, for tests.
std::string SecretLineProblem(const std::string& text);

}  // namespace k3
