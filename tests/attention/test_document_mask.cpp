// Block-causal (document) masking: the flash kernel and math attention with
// doc_start against an independent reference that runs causal attention on
// each document alone (fp64) and concatenates — what "no token attends
// across a document boundary" means.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "attention_test_util.hpp"
#include "titan/ops/attention/document_mask.hpp"
#include "titan/ops/attention/flash_function.hpp"
#include "titan/ops/attention/math_attention.hpp"
#include "titan/models/llama3/transformer.hpp"
#include "titan/util/error.hpp"

using namespace titan::ops;

namespace {

// doc_start rows from document lengths (each row's lengths sum to seq).
at::Tensor starts_from_lengths(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> flat;
  for (const auto& lens : rows) {
    int64_t pos = 0;
    for (int64_t len : lens) {
      for (int64_t i = 0; i < len; ++i) flat.push_back(pos);
      pos += len;
    }
  }
  return at::tensor(flat, at::kLong).view({static_cast<int64_t>(rows.size()), -1});
}

// Causal attention per document, fp64, gradients by autograd: the reference.
attn_test::Result per_document(const attn_test::Inputs& in, const std::vector<std::vector<int64_t>>& rows) {
  at::Tensor q = in.q.to(at::kDouble).requires_grad_(), k = in.k.to(at::kDouble).requires_grad_(),
             v = in.v.to(at::kDouble).requires_grad_();
  std::vector<at::Tensor> outs;
  for (size_t b = 0; b < rows.size(); ++b) {
    std::vector<at::Tensor> docs;
    int64_t pos = 0;
    for (int64_t len : rows[b]) {
      auto part = [&](const at::Tensor& t) { return t.select(0, b).unsqueeze(0).narrow(2, pos, len); };
      docs.push_back(math_attention(part(q), part(k), part(v), /*causal=*/true));
      pos += len;
    }
    outs.push_back(at::cat(docs, 2));
  }
  at::Tensor out = at::cat(outs, 0);
  out.backward(in.dout.to(at::kDouble));
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

attn_test::Result run(bool flash, const attn_test::Inputs& in, const at::Tensor& doc_start) {
  at::Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(), v = in.v.clone().requires_grad_();
  FlashOptions small;  // small tiles so that documents straddle several
  small.q_tile = 32, small.kv_tile = 64;
  at::Tensor out = flash ? flash_attention(q, k, v, true, std::nullopt, small, doc_start)
                         : math_attention(q, k, v, true, std::nullopt, doc_start);
  out.backward(in.dout);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

}  // namespace

TEST(DocumentMask, StartsFromBosTokens) {
  const int64_t bos = 7;
  // Row 0 begins inside a document; BOS at 3 and 6. Row 1 opens with BOS
  // and holds one document.
  const at::Tensor tokens = at::tensor(std::vector<int64_t>{4, 5, 8, bos, 1, 2, bos, 3, 9, 9, bos, 1, 1, 1, 1, 1}, at::kLong).view({2, 8});
  const at::Tensor want = at::tensor(std::vector<int64_t>{0, 0, 0, 3, 3, 3, 6, 6, /**/ 0, 0, 2, 2, 2, 2, 2, 2}, at::kLong).view({2, 8});
  EXPECT_TRUE(at::equal(document_starts(tokens, bos), want)) << document_starts(tokens, bos);
  const at::Tensor pos = document_positions(want);
  EXPECT_TRUE(at::equal(pos, at::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 0, 1, 0, 1, 2, 3, 4, 5}, at::kLong).view({2, 8})));
}

// Documents shorter than a tile, longer than several, of length 1, and a
// row that is one document (plain causal): forward and all gradients.
TEST(DocumentMask, FlashAndMathEqualPerDocumentAttention) {
  const std::vector<std::vector<int64_t>> rows = {{5, 150, 1, 94, 50}, {300}, {17, 17, 17, 17, 17, 17, 17, 181}};
  const attn_test::Inputs in = attn_test::make_inputs(3, 4, 2, 300, 64, 11);
  const at::Tensor doc_start = starts_from_lengths(rows);
  const attn_test::Result ref = per_document(in, rows);
  for (bool flash : {true, false}) {
    const attn_test::Result got = run(flash, in, doc_start);
    const double e_out = attn_test::rel_diff(got.out, ref.out), e_dq = attn_test::rel_diff(got.dq, ref.dq),
                 e_dk = attn_test::rel_diff(got.dk, ref.dk), e_dv = attn_test::rel_diff(got.dv, ref.dv);
    std::printf("%-5s block-causal vs per-document fp64: out %.3g dq %.3g dk %.3g dv %.3g\n", flash ? "flash" : "math",
                e_out, e_dq, e_dk, e_dv);
    // fp32 against fp64: measured <= 6e-7 for both (max-abs relative to the
    // reference's largest value); a mask leak across one boundary is O(0.1).
    for (double e : {e_out, e_dq, e_dk, e_dv}) EXPECT_LT(e, 3e-6) << (flash ? "flash" : "math");
  }
  // And the mask matters: plain causal attention differs at O(1).
  at::Tensor plain = flash_attention(in.q, in.k, in.v, true);
  EXPECT_GT(attn_test::rel_diff(plain, ref.out), 0.05);
}

TEST(DocumentMask, BadStartsAreOneLineErrors) {
  const attn_test::Inputs in = attn_test::make_inputs(1, 2, 2, 8, 16, 3);
  const at::Tensor decreasing = at::tensor(std::vector<int64_t>{0, 0, 2, 2, 1, 1, 1, 1}, at::kLong).view({1, 8});
  const at::Tensor ahead = at::tensor(std::vector<int64_t>{0, 0, 2, 2, 5, 5, 5, 5}, at::kLong).view({1, 8});
  const at::Tensor ok = at::tensor(std::vector<int64_t>{0, 0, 2, 2, 2, 5, 5, 5}, at::kLong).view({1, 8});
  EXPECT_THROW(flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, decreasing), titan::Error);
  EXPECT_THROW(flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, ahead), titan::Error);
  EXPECT_THROW(flash_attention_forward(in.q, in.k, in.v, /*causal=*/false, std::nullopt, {}, ok), titan::Error);
  EXPECT_THROW(math_attention(in.q, in.k, in.v, true, std::nullopt, ok.to(at::kInt)), titan::Error);
  EXPECT_NO_THROW(flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, ok));
}

// The model end to end: a block-causal forward of a window packed from
// three documents equals running each document through the same model on
// its own (causal, positions from 0) and concatenating the logits — for
// every attention backend. The reference uses no document masking at all.
TEST(DocumentMask, ModelEqualsEachDocumentAlone) {
  titan::models::llama3::ModelArgs args = titan::models::llama3::flavor_args("debugmodel");
  args.dim = 64, args.n_layers = 2, args.n_heads = 4, args.n_kv_heads = 2, args.vocab_size = 97;
  args.max_seq_len = 96;
  const std::vector<int64_t> lengths = {30, 1, 65};
  at::manual_seed(5);
  const at::Tensor tokens = at::randint(0, args.vocab_size, {1, 96}, at::kLong);
  const at::Tensor doc_start = starts_from_lengths({lengths});
  for (const char* backend : {"sdpa", "flash", "math"}) {
    titan::models::llama3::ModelArgs a = args;
    a.attn_type = backend;
    a.attn_mask_type = "block_causal";
    at::manual_seed(9);
    titan::models::llama3::Transformer packed(a, at::TensorOptions().dtype(at::kFloat));
    packed->init_weights();
    a.attn_mask_type = "causal";
    titan::models::llama3::Transformer alone(a, at::TensorOptions().dtype(at::kFloat));
    {
      at::NoGradGuard no_grad;
      auto src = packed->named_parameters();
      for (auto& p : alone->named_parameters()) p.value().copy_(src[p.key()]);
    }
    at::NoGradGuard no_grad;
    const at::Tensor got = packed->forward(tokens, doc_start);
    std::vector<at::Tensor> parts;
    int64_t pos = 0;
    for (int64_t len : lengths) {
      parts.push_back(alone->forward(tokens.narrow(1, pos, len)));
      pos += len;
    }
    const at::Tensor want = at::cat(parts, 1);
    const double e = attn_test::rel_diff(got, want);
    std::printf("%-5s model, block-causal window vs each document alone: logits %.3g\n", backend, e);
    // Measured 1.8e-7 for each backend: fp32 rounding of different
    // reduction orders. Cross-document attention or positions
    // that do not restart would be O(1).
    EXPECT_LT(e, 3e-6) << backend;
    EXPECT_THROW(packed->forward(tokens), titan::Error) << "block_causal without doc_start must refuse";
  }
}

// A batch's doc_start is checked (on a GPU: copied to the host)
// once, not in every layer's forward and backward. The same unchanged
// tensor hits the cache; an in-place change (its version moves) or another
// tensor is checked again, and bad bounds still throw every time.
TEST(DocumentMask, StartsAreCheckedOncePerTensor) {
  const attn_test::Inputs in = attn_test::make_inputs(1, 2, 2, 8, 16, 3);
  at::Tensor ok = at::tensor(std::vector<int64_t>{0, 0, 2, 2, 2, 5, 5, 5}, at::kLong).view({1, 8});
  const int64_t before = row_bound_checks_run();
  for (int layer = 0; layer < 4; ++layer) flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, ok);
  EXPECT_EQ(row_bound_checks_run() - before, 1) << "four layers, one check";
  // Changed in place: checked again, and the bad value is caught.
  ok[0][4] = 1;
  EXPECT_THROW(flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, ok), titan::Error);
  EXPECT_THROW(flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, ok), titan::Error)
      << "a failed check is not cached";
  ok[0][4] = 2;
  flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, ok);
  const at::Tensor copy = ok.clone();  // equal values, another tensor: checked on its own
  const int64_t mid = row_bound_checks_run();
  flash_attention_forward(in.q, in.k, in.v, true, std::nullopt, {}, copy);
  EXPECT_EQ(row_bound_checks_run() - mid, 1);
  // The same tensor under another rule (key bounds) is another check.
  checked_key_begin(ok, /*causal=*/true, 1, 8, 8, "test");
  EXPECT_EQ(row_bound_checks_run() - mid, 2);
  checked_key_begin(ok, /*causal=*/true, 1, 8, 8, "test");
  EXPECT_EQ(row_bound_checks_run() - mid, 2);
}
