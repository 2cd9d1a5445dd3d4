// The progress line's text.
#include "launcher/progress.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

namespace k3::launch {
namespace {

TEST(Progress, BytesWithPercentRateAndEta) {
  EXPECT_EQ(ProgressText("pinning trunk", 512.0 * 1024 * 1024, 2048.0 * 1024 * 1024, 2.0, true),
            "[launch] pinning trunk: 512.0 MiB of 2.00 GiB, 25%, 268 MB/s, ETA 6 s");
}

TEST(Progress, TokensAndFinished) {
  EXPECT_EQ(ProgressText("prefill", 30, 120, 3.0, false), "[launch] prefill: 30 of 120, 25%, 10.0 tokens/s, ETA 9 s");
  EXPECT_EQ(ProgressText("prefill", 120, 120, 4.0, false), "[launch] prefill: 120 of 120, 100%, 30.0 tokens/s");
  EXPECT_EQ(ProgressText("decoding", 0, 10, 0.0, false), "[launch] decoding: 0 of 10, 0%");
}

}  // namespace
}  // namespace k3::launch

namespace k3::launch {
namespace {

// What a ProgressLine writes to fd 2, captured through a temporary file.
class Captured {
 public:
  Captured() : f_(std::tmpfile()), saved_(::dup(2)) { ::dup2(::fileno(f_), 2); }
  std::string Take() {
    ::dup2(saved_, 2);
    ::close(saved_);
    std::string s;
    std::rewind(f_);
    for (int c; (c = std::fgetc(f_)) != EOF;) s.push_back(static_cast<char>(c));
    std::fclose(f_);
    return s;
  }

 private:
  std::FILE* f_;
  int saved_;
};

TEST(ProgressLine, TerminalRedrawsInPlaceAndKeepsGeneratedTextWhole) {
  Captured cap;
  {
    ProgressLine p(false, true, true);
    p.Show("[launch] a", true);
    p.BeforeStdout();          // clears the live line before text goes to the same terminal
    p.AfterStdout(false);      // the text is mid-row now
    p.Show("[launch] b", true);  // not drawn over the text
    p.Always("[service] x");     // held back: the text row is not finished
    p.BeforeStdout();
    p.AfterStdout(true);         // the text row ended: held lines follow
    p.Always("[service] y");
    p.BeforeStdout();
    p.AfterStdout(false);
    p.Always("[launch] done");
    p.FinishText();              // ends the text row, then the held line
  }
  EXPECT_EQ(cap.Take(), "\r\033[K[launch] a\r\033[K[service] x\n[service] y\n\n[launch] done\n");
}

TEST(ProgressLine, PlainLinesWhenNotATerminalAndNothingWhenQuiet) {
  Captured cap;
  {
    ProgressLine p(false, false, false, 3600);
    p.Show("[launch] a");
    p.Show("[launch] b");  // within the interval: dropped
    p.Show("[launch] c", true);
    p.Info("[launch] info");
    ProgressLine q(true, true, true);
    q.Show("[launch] x", true);
    q.Info("[launch] y");
    q.Always("[launch] summary");
  }
  EXPECT_EQ(cap.Take(), "[launch] a\n[launch] c\n[launch] info\n[launch] summary\n");
}

}  // namespace
}  // namespace k3::launch
