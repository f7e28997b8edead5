#include "titan/verify/reference_trainer.hpp"

#include "titan/util/error.hpp"

namespace titan::verify {

train::TrainerOptions single_process_reference(int64_t dp_ranks, train::TrainerOptions base) {
  TITAN_CHECK(dp_ranks >= 1, "single_process_reference: the number of data-parallel ranks must be >= 1, got ",
              dp_ranks);
  train::DataParallelReads reads;
  reads.degree = dp_ranks;
  reads.ranks.clear();
  for (int64_t r = 0; r < dp_ranks; ++r) reads.ranks.push_back(r);
  base.single_process = std::move(reads);
  return base;
}

}  // namespace titan::verify
