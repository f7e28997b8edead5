#include "titan/models/llama3/flops.hpp"

#include "titan/util/error.hpp"

namespace titan::models::llama3 {

int64_t count_embedding_parameters(const ModelArgs& args) { return args.vocab_size * args.dim; }

int64_t count_parameters(const ModelArgs& args) {
  const int64_t d = args.dim, q = args.head_dim(), h = args.n_heads, kv = args.kv_heads();
  const int64_t f = args.ffn_hidden_dim();
  const int64_t attention = d * h * q + 2 * d * kv * q + h * q * d;
  const int64_t feed_forward = 3 * d * f;
  const int64_t norms = 2 * d;
  const int64_t output = args.tie_word_embeddings ? 0 : args.vocab_size * d;  // tied: the embedding's
  return count_embedding_parameters(args) + args.n_layers * (attention + feed_forward + norms) + d + output;
}

double flops_per_token(const ModelArgs& args, int64_t seq_len) {
  TITAN_CHECK(seq_len > 0, "flops_per_token: seq_len must be positive, got ", seq_len);
  // torchtitan's 6·N: N leaves out the embedding table (a lookup, no
  // matmul), except when it is tied: then it is also the output matmul's
  // weight, and torchtitan 0.3 (get_dense_model_nparams_and_flops) keeps it
  // in. Either way the output matmul's vocab·dim is counted once.
  const int64_t matmul_params = args.tie_word_embeddings ? count_parameters(args)
                                                         : count_parameters(args) - count_embedding_parameters(args);
  const double dense = 6.0 * static_cast<double>(matmul_params);
  const double attention = 12.0 * static_cast<double>(args.n_layers) * static_cast<double>(args.n_heads) *
                           static_cast<double>(args.head_dim()) * static_cast<double>(seq_len);
  return dense + attention;
}

}  // namespace titan::models::llama3
