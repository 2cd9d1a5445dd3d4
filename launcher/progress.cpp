#include "progress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/plan/memory_plan.h"
#include "common/process_init.h"

namespace k3::launch {
namespace {

std::string Amount(double v, bool bytes) {
  char buf[48];
  // The plan's units from 1 MiB up; below it KiB, not the plan's exact bytes (a live count).
  if (bytes && v >= 1024.0 * 1024) return k3::FormatBytes(static_cast<int64_t>(v));
  if (!bytes) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.0f KiB", v / 1024.0);
  return buf;
}

}  // namespace

std::string ProgressText(const std::string& what, double done, double total, double seconds, bool bytes) {
  std::string s = "[launch] " + what + ": " + Amount(done, bytes);
  if (total > 0) {
    char pct[32];
    std::snprintf(pct, sizeof pct, " of %s, %.0f%%", Amount(total, bytes).c_str(), 100.0 * std::min(done, total) / total);
    s += pct;
  }
  if (seconds > 0 && done > 0) {
    const double rate = done / seconds;
    char r[64];
    if (bytes) std::snprintf(r, sizeof r, ", %.0f MB/s", rate / 1e6);
    else std::snprintf(r, sizeof r, ", %.1f tokens/s", rate);
    s += r;
    if (total > done) {
      std::snprintf(r, sizeof r, ", ETA %.0f s", (total - done) / rate);
      s += r;
    }
  }
  return s;
}

ProgressLine::ProgressLine(bool quiet, bool stderr_tty, bool stdout_same_tty, double plain_interval_seconds)
    : quiet_(quiet), tty_(stderr_tty), same_tty_(stderr_tty && stdout_same_tty), plain_interval_(plain_interval_seconds) {}

ProgressLine ProgressLine::ForStdio(bool quiet) {
  const bool tty = ::isatty(2) == 1;
  bool same = false;
  struct stat a {}, b {};
  if (tty && ::isatty(1) == 1 && ::fstat(1, &a) == 0 && ::fstat(2, &b) == 0) same = a.st_rdev == b.st_rdev;
  return ProgressLine(quiet, tty, same);
}

void ProgressLine::Write(const std::string& s) {
  WriteStderr(s.data(), s.size());  // one write per line: several processes share this stderr
}

void ProgressLine::Show(const std::string& text, bool force) {
  if (quiet_) return;
  const auto now = Clock::now();
  // Rate limit from the previous drawing (none yet: draw now).
  const double since = drawn_ ? std::chrono::duration<double>(now - last_draw_).count() : 1e9;
  if (tty_) {
    if (stdout_midline_) return;  // the row holds generated text
    if (!force && since < 0.1) return;
    Write("\r\033[K" + text);
    shown_ = true;
  } else {
    if (!force && since < plain_interval_) return;
    Write(text + "\n");
  }
  last_draw_ = now;
  drawn_ = true;
}

void ProgressLine::Clear() {
  if (tty_ && shown_) Write("\r\033[K");
  shown_ = false;
}

void ProgressLine::Info(const std::string& line) {
  if (quiet_) return;
  Always(line);
}

void ProgressLine::Always(const std::string& line) {
  Clear();
  if (same_tty_ && stdout_midline_) {
    held_.push_back(line);
    if (held_.size() > 1000) FinishText();  // text without a newline for that long: stop holding
    return;
  }
  Write(line + "\n");
}

void ProgressLine::FinishText() {
  if (same_tty_ && stdout_midline_) Write("\n");
  stdout_midline_ = false;
  std::vector<std::string> lines;
  lines.swap(held_);
  for (const std::string& l : lines) Write(l + "\n");
}

void ProgressLine::BeforeStdout() {
  if (same_tty_) Clear();
}

void ProgressLine::AfterStdout(bool text_ends_line) {
  if (!same_tty_) return;
  stdout_midline_ = !text_ends_line;
  if (!stdout_midline_ && !held_.empty()) FinishText();
}

}  // namespace k3::launch
