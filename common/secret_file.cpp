#include "common/secret_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "common/user_file.h"

namespace k3 {

std::string SecretLineProblem(const std::string& text) {
  std::string line = text;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) return "is empty";
  for (unsigned char c : line) {
    if (c == '\n') return "has more than one line";
    if (c <= ' ' || c >= 0x7f) return "holds a space, a control character or a non-ASCII byte";
  }
  return "";
}

std::string ReadSecretFile(const std::string& path, std::string_view what) {
  const std::string prefix = std::string(what) + " " + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(kExitBadInput, prefix + ": cannot open (" + std::strerror(errno) + ")");
  if (S_ISREG(st.st_mode)) {  // other kinds: ReadUserFile's message
    if (st.st_uid != ::geteuid() && st.st_uid != 0)
      throw Error(kExitBadInput, prefix + ": owned by another user (uid " + std::to_string(st.st_uid) + "); not trusted");
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      throw Error(kExitBadInput, prefix + ": other users can access it (mode " + mode + "); chmod 600 it");
    }
  }
  std::string text = ReadUserFile(path, kMaxSecretFileBytes, what, kExitBadInput);
  if (const std::string bad = SecretLineProblem(text); !bad.empty()) throw Error(kExitBadInput, prefix + ": " + bad);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace k3
