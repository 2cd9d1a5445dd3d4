// Checks every primitive op of the compute core against the float64 reference's op cases
// ($K3_TESTDATA/ops, written by tests/reference/emit_op_cases.py). The engine computes in
// fp32 (with double reductions), so each op gets a stated tolerance:
//   |got - want| <= atol + rtol * |want|, atol = 1e-5, rtol = 1e-4 (the C engine's MANIFEST
//   tolerance) unless an op says otherwise; router indices must match exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "ops.h"

namespace k3::compute {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string OpsDir() {
  const char* d = std::getenv("K3_TESTDATA");
  return d ? std::string(d) + "/ops" : std::string();
}

struct Case {
  std::string op, id;
  json params;
  std::map<std::string, std::vector<double>> t;
  std::map<std::string, std::vector<int64_t>> shape;
  std::vector<float> F(const std::string& n) const {
    const auto& v = t.at(n);
    return std::vector<float>(v.begin(), v.end());
  }
};

std::vector<Case> LoadCases() {
  std::vector<Case> cases;
  const std::string dir = OpsDir();
  if (dir.empty() || !fs::is_directory(dir)) return cases;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json" || e.path().filename() == "index.json") continue;
    std::ifstream f(e.path());
    const json j = json::parse(f);
    Case c;
    c.op = j.at("op").get<std::string>();
    c.id = j.at("case").get<std::string>();
    c.params = j.at("params");
    for (const auto& [name, tv] : j.at("tensors").items()) {
      c.t[name] = tv.at("data").get<std::vector<double>>();
      c.shape[name] = tv.at("shape").get<std::vector<int64_t>>();
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> c = LoadCases();
  return c;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what, double atol = 1e-5, double rtol = 1e-4) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::fabs(want[i]);
    ASSERT_LE(std::fabs(got[i] - want[i]), tol)
        << what << " [" << i << "]: got " << got[i] << " want " << want[i];
  }
}

std::string Label(const Case& c) { return c.op + "." + c.id; }

// Runs `fn` on every case of `op`; fails when the op has no case at all.
template <typename Fn>
void ForOp(const std::string& op, Fn fn) {
  int n = 0;
  for (const Case& c : Cases()) {
    if (c.op != op) continue;
    SCOPED_TRACE(Label(c));
    fn(c);
    ++n;
  }
  EXPECT_GT(n, 0) << "no op cases for '" << op << "' in " << OpsDir();
}

TEST(OpCases, DirectoryHasCases) {
  ASSERT_FALSE(OpsDir().empty()) << "K3_TESTDATA is not set";
  ASSERT_FALSE(Cases().empty()) << "no op cases in " << OpsDir();
}

TEST(OpCases, RmsNorm) {
  ForOp("rms_norm", [](const Case& c) {
    const auto x = c.F("x"), w = c.F("w");
    std::vector<float> y(x.size());
    RmsNorm(x.data(), w.data(), static_cast<int64_t>(x.size()), c.params["eps"], y.data());
    ExpectClose(y, c.t.at("expected_y"), Label(c));
  });
}

TEST(OpCases, L2Norm) {
  ForOp("l2_norm", [](const Case& c) {
    const auto x = c.F("x");
    std::vector<float> y(x.size());
    L2Norm(x.data(), static_cast<int64_t>(x.size()), c.params["eps"], y.data());
    ExpectClose(y, c.t.at("expected_y"), Label(c));
  });
}

TEST(OpCases, SituGlu) {
  ForOp("situ_glu", [](const Case& c) {
    const auto a = c.F("a"), b = c.F("b");
    std::vector<float> y(a.size());
    SituGlu(a.data(), b.data(), static_cast<int64_t>(a.size()), c.params["beta1"],
            c.params["beta2"], true, y.data());
    ExpectClose(y, c.t.at("expected_y"), Label(c));
    for (float v : y) EXPECT_LT(std::fabs(v), 100.0f + 1e-3f);  // |SiTU| < β1·β2 bound
  });
}

TEST(OpCases, AttnRes) {
  ForOp("attn_res", [](const Case& c) {
    const auto cands = c.F("cands"), wn = c.F("w_norm"), wp = c.F("w_proj");
    const int64_t m = c.shape.at("cands")[0], n = c.shape.at("cands")[1];
    std::vector<const float*> ptr;
    for (int64_t i = 0; i < m; ++i) ptr.push_back(cands.data() + i * n);
    std::vector<float> fold(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) fold[i] = wn[i] * wp[i];
    AttnRes(ptr.data(), static_cast<int>(m), fold.data(), n, c.params["eps"], y.data());
    ExpectClose(y, c.t.at("expected_y"), Label(c));
  });
}

TEST(OpCases, ShortConv) {
  ForOp("short_conv", [](const Case& c) {
    const int K = c.params["K"];
    const auto taps = c.F("taps"), u = c.F("u");
    auto state = c.F("state_in");
    const int64_t T = c.shape.at("u")[0], C = c.shape.at("u")[1];
    std::vector<float> out(u.size());
    ShortConv(taps.data(), K, state.data(), u.data(), T, C, 0, C, out.data());
    ExpectClose(out, c.t.at("expected_out"), Label(c) + " out");
    ExpectClose(state, c.t.at("expected_state"), Label(c) + " state", 0, 0);  // copies: exact
  });
}

TEST(OpCases, KdaGate) {
  ForOp("kda_gate", [](const Case& c) {
    const auto a = c.F("a_log"), z = c.F("z"), dt = c.F("dt_bias");
    const int64_t H = static_cast<int64_t>(a.size()), D = static_cast<int64_t>(z.size()) / H;
    std::vector<float> g(z.size());
    const double lb = c.params["lower_bound"];
    KdaGate(a.data(), z.data(), dt.data(), H, D, lb, g.data());
    ExpectClose(g, c.t.at("expected_g"), Label(c));
    for (float v : g) {
      EXPECT_LE(v, 0.0f);
      EXPECT_GE(v, lb);
    }
  });
}

TEST(OpCases, KdaRecurrence) {
  ForOp("kda_recurrence", [](const Case& c) {
    auto S = c.F("S_in");
    const auto q = c.F("q"), k = c.F("k"), v = c.F("v"), al = c.F("alpha"), be = c.F("beta");
    const int64_t T = c.shape.at("q")[0], D = c.shape.at("q")[1];
    std::vector<float> o(static_cast<size_t>(T * D));
    for (int64_t t = 0; t < T; ++t)
      KdaStep(S.data(), D, q.data() + t * D, k.data() + t * D, v.data() + t * D,
              al.data() + t * D, be[t], o.data() + t * D);
    ExpectClose(o, c.t.at("expected_o"), Label(c) + " o");
    ExpectClose(S, c.t.at("expected_S"), Label(c) + " S");
  });
}

TEST(OpCases, GatedRmsNorm) {
  ForOp("gated_rms_norm", [](const Case& c) {
    const auto o = c.F("o"), w = c.F("w"), g = c.F("gate");
    const int64_t H = c.shape.at("o")[0], D = c.shape.at("o")[1];
    std::vector<float> y(static_cast<size_t>(H * D));
    for (int64_t h = 0; h < H; ++h)
      GatedRmsNorm(o.data() + h * D, w.data(), g.data() + h * D, D, c.params["eps"],
                   y.data() + h * D);
    ExpectClose(y, c.t.at("expected_y"), Label(c));
  });
}

TEST(OpCases, Router) {
  ForOp("router", [](const Case& c) {
    const auto lg = c.F("logits"), b = c.F("bias");
    const int64_t T = c.shape.at("logits")[0], E = c.shape.at("logits")[1];
    const int64_t K = c.params["top_k"];
    std::vector<int32_t> idx(static_cast<size_t>(T * K));
    std::vector<float> w(static_cast<size_t>(T * K));
    for (int64_t t = 0; t < T; ++t)
      Route(lg.data() + t * E, b.data(), E, K, c.params["renormalize"], c.params["scaling"],
            idx.data() + t * K, w.data() + t * K);
    const auto& want = c.t.at("expected_idx");
    for (size_t i = 0; i < idx.size(); ++i)
      ASSERT_EQ(idx[i], static_cast<int32_t>(want[i])) << Label(c) << " idx[" << i << "]";
    ExpectClose(w, c.t.at("expected_weights"), Label(c) + " weights", 1e-6, 1e-5);
  });
}

TEST(OpCases, Mxfp4Matvec) {
  ForOp("mxfp4_matvec", [](const Case& c) {
    const auto& pk = c.t.at("packed");
    const auto& sc = c.t.at("scales");
    const auto x = c.F("x");
    std::vector<uint8_t> packed(pk.begin(), pk.end()), scales(sc.begin(), sc.end());
    kern::Mxfp4Mat m;
    m.packed = packed.data();
    m.scales = scales.data();
    m.rows = c.shape.at("packed")[0];
    m.cols = c.shape.at("packed")[1] * 2;
    m.group = c.params["group"];
    std::vector<float> y(static_cast<size_t>(m.rows));
    kern::MatmulMxfp4(m, x.data(), 1, y.data());
    ExpectClose(y, c.t.at("expected_y"), Label(c));
  });
}

TEST(OpCases, MlaAttention) {
  ForOp("mla_attention", [](const Case& c) {
    const int64_t nh = c.params["heads"], nope = c.params["nope"], rope = c.params["rope"];
    const int64_t vd = c.params["v"];
    const double scale = c.params["scale"];
    const auto q = c.F("q"), kn = c.F("k_nope"), kp = c.F("k_pe"), v = c.F("v");
    const int64_t T = c.shape.at("q")[0], S = c.shape.at("k_nope")[0];
    std::vector<float> out(static_cast<size_t>(T * nh * vd)), scratch(static_cast<size_t>(S));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        const float* qh = q.data() + (t * nh + h) * (nope + rope);
        MlaAttendHead(qh, qh + nope, nope, rope, kn.data() + h * nope, nh * nope, kp.data(), rope,
                      v.data() + h * vd, nh * vd, vd, S - T + t + 1, scale, scratch.data(),
                      out.data() + (t * nh + h) * vd);
      }
    ExpectClose(out, c.t.at("expected_out"), Label(c));
  });
}

}  // namespace
}  // namespace k3::compute
