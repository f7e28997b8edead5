#include "titan/train/validator.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "titan/dist/process_group.hpp"
#include "titan/util/error.hpp"
#include "titan/util/range.hpp"

namespace titan::train {

Validator::Validator(const config::ValidationSection& cfg, std::shared_ptr<const data::Tokenizer> tokenizer,
                     const std::vector<int64_t>& dp_ranks, int64_t dp_world, bool document_masking,
                     const dist::ProcessGroup* world, c10::Device device)
    : cfg_(cfg), device_(device) {
  TITAN_CHECK(!dp_ranks.empty(), "validation needs at least one data-parallel rank to read");
  int64_t whole_pass = -1;  // the fewest whole batches of one pass over any rank's part
  for (int64_t dp : dp_ranks) {
    data::DataLoaderOptions o;
    o.dataset = cfg_.dataset;
    o.dataset_path = cfg_.dataset_path;
    o.batch_size = cfg_.local_batch_size;
    o.seq_len = cfg_.seq_len;
    o.dp_rank = dp;
    o.dp_world = dp_world;
    o.document_masking = document_masking;
    try {
      loaders_.push_back(std::make_unique<data::DataLoader>(tokenizer, o));
    } catch (const Error& e) {
      // The data layer names [training]'s keys; here they are [validation]'s.
      std::string m = e.what();
      for (const auto& [from, to] : {std::pair<std::string, std::string>{"[training] dataset_path", "[validation] dataset_path"},
                                     {"--training.dataset_path", "--validation.dataset_path"},
                                     {"--training.seq_len", "--validation.seq_len"}})
        for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size()))
          m.replace(at, from.size(), to);
      throw Error("[validation] " + m);
    }
    starts_.push_back(loaders_.back()->state_dict());
    if (cfg_.steps == -1) {
      // A batch counts when it ends inside the first pass (the stream
      // starts over in the one that crosses the end).
      int64_t n = 0;
      while (true) {
        loaders_.back()->next();
        if (loaders_.back()->epoch() > 0) break;
        ++n;
      }
      loaders_.back()->load_state_dict(starts_.back());
      whole_pass = whole_pass < 0 ? n : std::min(whole_pass, n);
    }
  }
  if (cfg_.steps != -1) {
    batches_ = cfg_.steps;
    return;
  }
  if (world) {
    at::Tensor n = at::full({1}, static_cast<double>(whole_pass), at::TensorOptions().dtype(at::kDouble).device(device_));
    world->all_reduce(n, dist::ReduceOp::Min);
    whole_pass = static_cast<int64_t>(n.cpu().item<double>());
  }
  TITAN_CHECK(whole_pass > 0, "[validation] dataset '", cfg_.dataset, "' holds no whole batch of ",
              cfg_.local_batch_size, " x ", cfg_.seq_len + 1, " tokens for some data-parallel rank: lower ",
              "[validation] local_batch_size or seq_len, or give it more text");
  batches_ = whole_pass;
}

ValidationResult Validator::run(const std::function<LossSum(data::Batch)>& loss_of,
                                const dist::ProcessGroup* loss_group) {
  TITAN_PROFILE_RANGE("titan::validate");
  const auto t0 = std::chrono::steady_clock::now();
  at::NoGradGuard no_grad;
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device_);
  at::Tensor sum = at::zeros({}, f64), count = at::zeros({}, f64);
  for (size_t k = 0; k < loaders_.size(); ++k) loaders_[k]->load_state_dict(starts_[k]);
  // Batch by batch, every reader's in turn: a one-process reference of N
  // ranks runs what the N ranks run, in the order of their sums.
  for (int64_t b = 0; b < batches_; ++b) {
    for (auto& loader : loaders_) {
      const LossSum s = loss_of(loader->next());
      sum += s.sum;
      count += s.count;
    }
  }
  at::Tensor both = at::stack({sum, count});
  if (loss_group) loss_group->all_reduce(both);
  const at::Tensor host = both.cpu();
  ValidationResult r;
  r.targets = static_cast<int64_t>(host[1].item<double>());
  r.loss = host[0].item<double>() / host[1].item<double>();
  r.batches = batches_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace titan::train
