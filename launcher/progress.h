// The launcher's one live progress line on stderr (trunk pinning, prompt prefill, decode
// rate) and its own informational lines. On a terminal the live line is redrawn in place
// (\r + clear-line) and cleared before anything else is written to that terminal; otherwise
// it is a plain line at most every few seconds. Quiet mode drops both (errors and the final
// summary are printed by the caller regardless).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace k3::launch {

// "pin: 1.2 GiB of 3.4 GiB, 35%, 850 MB/s, ETA 3 s" and the like; pure, for tests.
std::string ProgressText(const std::string& what, double done, double total, double seconds, bool bytes);

class ProgressLine {
 public:
  using Clock = std::chrono::steady_clock;
  ProgressLine(bool quiet, bool stderr_tty, bool stdout_same_tty, double plain_interval_seconds = 5);
  // From the real file descriptors 1 and 2.
  static ProgressLine ForStdio(bool quiet);

  // The live line (rate-limited; `force` draws it even if one was drawn just now).
  void Show(const std::string& text, bool force = false);
  // A permanent informational line ("[launch] ..."); dropped when quiet.
  void Info(const std::string& line);
  // Any line that must be seen (errors, summary): clears the live line first. While generated
  // text stands mid-row on the same terminal the line is held back until the text reaches a
  // newline (or FinishText), so the text is never split.
  void Always(const std::string& line);
  // No more stdout text: ends a mid-row text line on the terminal and writes held lines.
  void FinishText();
  // Call before writing to stdout; `text_ends_line`: what was written ends with '\n', so a
  // live line may be drawn again on that terminal row.
  void BeforeStdout();
  void AfterStdout(bool text_ends_line);
  void Clear();  // erases the live line (terminal only)
  bool quiet() const { return quiet_; }

 private:
  void Write(const std::string& s);
  bool quiet_, tty_, same_tty_;
  double plain_interval_;
  bool shown_ = false;         // a live line is on the terminal now
  bool stdout_midline_ = false;  // stdout text on the terminal row: no live line there
  std::vector<std::string> held_;  // lines waiting for the text row to end
  Clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace k3::launch
