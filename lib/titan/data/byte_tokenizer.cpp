#include "titan/data/byte_tokenizer.hpp"

#include "titan/util/error.hpp"

namespace titan::data {
namespace {
constexpr std::string_view kBos = "<|begin_of_text|>", kEos = "<|end_of_text|>";
}

std::vector<int64_t> ByteTokenizer::encode(std::string_view text, bool bos, bool eos, bool allow_special) const {
  std::vector<int64_t> out;
  out.reserve(text.size() + 2);
  if (bos) out.push_back(bos_id());
  for (size_t i = 0; i < text.size(); ++i) {
    if (allow_special && text[i] == '<') {
      if (text.compare(i, kBos.size(), kBos) == 0) {
        out.push_back(bos_id());
        i += kBos.size() - 1;
        continue;
      }
      if (text.compare(i, kEos.size(), kEos) == 0) {
        out.push_back(eos_id());
        i += kEos.size() - 1;
        continue;
      }
    }
    out.push_back(static_cast<uint8_t>(text[i]));
  }
  if (eos) out.push_back(eos_id());
  return out;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    TITAN_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary of ", describe());
    if (id < 256) out += static_cast<char>(id);
    else out += id == bos_id() ? kBos : kEos;
  }
  return out;
}

}  // namespace titan::data
