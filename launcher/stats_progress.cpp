#include "launcher/stats_progress.h"

#include "launcher/progress.h"

namespace k3::launch {

ProgressStep StatsProgress::Update(const std::string& service, const std::map<std::string, double>& st,
                                   double since_start, double since_generate, bool chat) {
  auto get = [&](const char* k) {
    auto it = st.find(k);
    return it == st.end() ? -1.0 : it->second;
  };
  if (service == "trunk-reader" && get("pin_bytes_total") > 0 && !pin_reported_) {
    const double done = get("pin_bytes_done"), total = get("pin_bytes_total");
    // The reader's own clock when it sends one (reads only, not its start-up).
    const std::string text =
        ProgressText("pinning trunk", done, total, get("pin_seconds") > 0 ? get("pin_seconds") : since_start, true);
    if (done < total) return {ProgressStep::kShow, text};
    pin_reported_ = true;
    return {ProgressStep::kInfo, text};
  }
  if (service == "compute" && get("prefill_tokens_total") > 0) {
    const double done = get("prefill_tokens_done"), total = get("prefill_tokens_total");
    const double request = get("prefill_request");
    // The Stats map keeps the last prefill keys: a later compute Stats shows them again.
    if (done >= total && request == last_final_ && !chat) return {};
    const double seconds = get("prefill_seconds") >= 0 ? get("prefill_seconds") : since_generate;
    const std::string text = ProgressText("prefill", done, total, seconds, false);
    if (done < total) return {ProgressStep::kShow, text};
    if (chat) return {ProgressStep::kClear, ""};
    last_final_ = request;
    return {ProgressStep::kInfo, text};
  }
  return {};
}

}  // namespace k3::launch
