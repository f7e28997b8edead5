// The three attention backends (sdpa, flash, math) agree: on bare q/k/v
// against the fp64 reference, and inside the Llama 3 model (logits and
// every parameter gradient).

#include <gtest/gtest.h>

#include <cstdio>

#include "attention_test_util.hpp"
#include "models/test_util.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/ops/attention/backend.hpp"
#include "titan/util/error.hpp"

using namespace titan::ops;
using attn_test::rel_diff;

TEST(AttentionBackends, NamesParseAndBadOnesAreErrors) {
  for (const std::string& n : attention_backend_names()) EXPECT_EQ(to_string(parse_attention_backend(n)), n);
  EXPECT_THROW(parse_attention_backend("flex"), titan::Error);
}

TEST(AttentionBackends, AllThreeMatchTheFp64Reference) {
  // fp32, GQA 2, causal and not. Measured worst: sdpa 6.4e-7, math 6.4e-7,
  // flash 6.4e-7 relative; 5e-6 is the fp32 tolerance used throughout.
  for (bool causal : {true, false}) {
    const auto in = attn_test::make_inputs(2, 4, 2, 77, 64, 21);
    const auto ref = attn_test::math_reference(in, causal);
    for (AttentionBackend b : {AttentionBackend::sdpa, AttentionBackend::flash, AttentionBackend::math}) {
      at::Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(),
                 v = in.v.clone().requires_grad_();
      at::Tensor out = attention(q, k, v, b, causal);
      out.backward(in.dout);
      const double d = std::max({rel_diff(out, ref.out), rel_diff(q.grad(), ref.dq), rel_diff(k.grad(), ref.dk),
                                 rel_diff(v.grad(), ref.dv)});
      std::printf("%-5s %-6s worst relative difference to fp64 math: %.2e\n", to_string(b).c_str(),
                  causal ? "causal" : "full", d);
      EXPECT_LT(d, 5e-6) << to_string(b);
    }
  }
}

namespace {

struct ModelRun {
  at::Tensor logits;
  std::vector<std::pair<std::string, at::Tensor>> grads;
};

ModelRun run_model(const std::string& attn_type) {
  auto args = titan::testing::tiny_args();
  args.attn_type = attn_type;
  torch::manual_seed(0);
  titan::models::llama3::Transformer model(args);
  model->init_weights();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor tokens = at::randint(args.vocab_size, {2, 32}, gen, at::kLong);
  const at::Tensor logits = model->forward(tokens);
  at::cross_entropy_loss(logits.flatten(0, 1), tokens.roll(-1, 1).flatten()).backward();
  ModelRun r{logits.detach(), {}};
  for (const auto& p : model->named_parameters()) r.grads.emplace_back(p.key(), p.value().grad());
  return r;
}

}  // namespace

TEST(AttentionBackends, ModelLogitsAndGradientsAgree) {
  // The tiny GQA model (4 query / 2 kv heads, head_dim 16, seq 32) in fp32.
  // Measured: flash 3.6e-7..4.1e-7 and math 4.6e-7 from sdpa, relative, worst over
  // logits and every gradient (fp32 rounding through two blocks).
  const ModelRun sdpa = run_model("sdpa");
  for (const std::string name : {"flash", "math"}) {
    const ModelRun other = run_model(name);
    double worst = rel_diff(other.logits, sdpa.logits);
    std::string where = "logits";
    for (size_t i = 0; i < sdpa.grads.size(); ++i) {
      const double d = rel_diff(other.grads[i].second, sdpa.grads[i].second);
      if (d > worst) worst = d, where = sdpa.grads[i].first;
    }
    std::printf("%s vs sdpa in the model: worst relative difference %.2e (%s)\n", name.c_str(), worst,
                where.c_str());
    EXPECT_LT(worst, 1e-5) << name;
  }
}

TEST(AttentionBackends, UnknownAttnTypeFailsModelValidation) {
  auto args = titan::testing::tiny_args();
  args.attn_type = "flex";
  EXPECT_THROW(args.validate(), titan::Error);
}
