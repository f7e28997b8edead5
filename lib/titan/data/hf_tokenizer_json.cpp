// Reading tokenizer.json and tokenizer_config.json: which parts of the
// `tokenizers` package's format titan understands, and a one-line error for
// everything else, so that a file titan cannot encode exactly as the
// package does is refused instead of encoded differently.
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "titan/data/hf_tokenizer.hpp"
#include "titan/data/pretokenize.hpp"
#include "titan/util/error.hpp"

namespace titan::data {
namespace {

// tokenizer.json is read into std::map objects (fast for a 128k-token
// vocab); tokenizer_config.json keeps its order, which decides new ids.
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

template <typename J = Json>
J parse_json(const std::string& text, const std::string& source) {
  try {
    return J::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message names the byte where the text stopped making sense
    // (a parse error, or a number too large for a double: out_of_range).
    std::string what = e.what();
    if (const size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw Error(source + ": not valid JSON (truncated or not a tokenizer file?): " + what);
  }
}

std::string type_of(const Json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "";
  return j["type"].get<std::string>();
}

template <typename J>
bool bool_field(const J& obj, const char* key, bool fallback, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  TITAN_CHECK(obj[key].is_boolean(), where, ": '", key, "' must be true or false, got ", obj[key].dump());
  return obj[key].template get<bool>();
}

// A field that must be absent/null (or one of the values that change nothing).
void require_unset(const Json& obj, const char* key, const std::string& where, const std::string& why) {
  if (!obj.contains(key) || obj[key].is_null()) return;
  const Json& v = obj[key];
  if ((v.is_string() && v.get<std::string>().empty()) || (v.is_number() && v.get<double>() == 0.0)) return;
  throw Error(where + ": '" + key + "' = " + v.dump() + " is not supported (" + why + ")");
}

std::vector<HfPreTokenizeStep> byte_level_steps(const Json& j, const std::string& where) {
  std::vector<HfPreTokenizeStep> steps;
  if (bool_field(j, "add_prefix_space", false, where)) steps.push_back(HfPreTokenizeStep::PrefixSpace);
  if (bool_field(j, "use_regex", true, where)) steps.push_back(HfPreTokenizeStep::SplitGpt2);
  return steps;
}

HfPreTokenizeStep split_step(const Json& j, const std::string& where) {
  const Json pattern = j.value("pattern", Json());
  TITAN_CHECK(pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string(), where,
              ": a Split pre-tokenizer must have a {\"Regex\": ...} pattern, got ", pattern.dump().substr(0, 80));
  const std::string regex = pattern["Regex"].get<std::string>();
  const std::string behavior = j.value("behavior", std::string());
  TITAN_CHECK(behavior == "Isolated" && !bool_field(j, "invert", false, where), where,
              ": a Split pre-tokenizer must have behavior \"Isolated\" and invert false, got behavior \"", behavior,
              "\"");
  if (regex == kLlama3Pattern) return HfPreTokenizeStep::SplitLlama3;
  if (regex == kGpt2Pattern) return HfPreTokenizeStep::SplitGpt2;
  throw Error(where + ": the Split regex '" + regex.substr(0, 80) +
              "' is neither Llama 3's nor GPT-2's pattern (the two titan implements)");
}

// Sequence[Split..., ByteLevel] (Llama 3) or a plain ByteLevel (GPT-2).
std::vector<HfPreTokenizeStep> pre_tokenizer_steps(const Json& j, const std::string& source) {
  const std::string where = source + ": pre_tokenizer";
  const std::string type = type_of(j);
  if (type == "ByteLevel") return byte_level_steps(j, where);
  TITAN_CHECK(type == "Sequence", where, " is ", j.is_null() ? std::string("null") : "'" + type + "'",
              ": titan reads byte-level BPE, whose pre_tokenizer is ByteLevel or a Sequence of Split steps "
              "ending in ByteLevel");
  const Json list = j.value("pretokenizers", Json::array());
  TITAN_CHECK(list.is_array() && !list.empty(), where, ": a Sequence needs a list 'pretokenizers'");
  std::vector<HfPreTokenizeStep> steps;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string t = type_of(list[i]);
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (t == "Split" && i + 1 < list.size()) {
      steps.push_back(split_step(list[i], at));
    } else if (t == "ByteLevel" && i + 1 == list.size()) {
      for (HfPreTokenizeStep s : byte_level_steps(list[i], at)) steps.push_back(s);
    } else {
      throw Error(at + " is '" + t + "': titan supports Split steps followed by one ByteLevel, last");
    }
  }
  return steps;
}

void read_model(const Json& model, const std::string& source, HfTokenizerSpec& spec) {
  const std::string where = source + ": model";
  TITAN_CHECK(model.is_object(), source, ": no \"model\" object (not a Hugging Face tokenizer.json?)");
  const std::string type = type_of(model);
  TITAN_CHECK(!type.empty(), where, " has no \"type\"");
  TITAN_CHECK(type == "BPE", where, " type '", type, "' is not supported: titan reads byte-level BPE (\"BPE\")");
  require_unset(model, "dropout", where, "BPE dropout makes encoding random");
  require_unset(model, "continuing_subword_prefix", where, "byte-level BPE has no subword prefix");
  require_unset(model, "end_of_word_suffix", where, "byte-level BPE has no word suffix");
  spec.ignore_merges = bool_field(model, "ignore_merges", false, where);
  TITAN_CHECK(!bool_field(model, "byte_fallback", false, where), where,
              ": byte_fallback = true is not supported (byte-level BPE has a token for every byte it needs)");
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    TITAN_CHECK(model["unk_token"].is_string(), where, ": unk_token must be a string or null, got ",
                model["unk_token"].dump());
    spec.unk_token = model["unk_token"].get<std::string>();
  }
  spec.fuse_unk = bool_field(model, "fuse_unk", false, where);

  static const Json kNone;  // model.value() would copy a 128k-entry vocab
  const Json& vocab = model.contains("vocab") ? model["vocab"] : kNone;
  TITAN_CHECK(vocab.is_object() && !vocab.empty(), where, " has no \"vocab\" object of token -> id");
  spec.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    TITAN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t{1} << 24), where,
                ": vocab id of '", token, "' must be an integer in [0, 2^24), got ", id.dump());
    spec.vocab.emplace_back(token, id.get<int64_t>());
  }

  const Json& merges = model.contains("merges") ? model["merges"] : kNone;
  TITAN_CHECK(merges.is_array(), where, " has no \"merges\" list");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {
      // The older spelling "a b": exactly one space (tokenizers splits on ' ').
      const std::string s = m.get<std::string>();
      if (spec.merges.empty() && s.rfind("#version", 0) == 0) continue;
      const size_t sp = s.find(' ');
      TITAN_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where, ": merge ", i, " '",
                  s.substr(0, 60), "' is not two tokens separated by one space");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      TITAN_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where, ": merge ", i,
                  " must be \"a b\" or [\"a\", \"b\"], got ", m.dump().substr(0, 60));
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
}

HfAddedToken added_token(const Json& j, const std::string& where) {
  TITAN_CHECK(j.is_object() && j.contains("content") && j["content"].is_string(), where,
              " must be an object with a string \"content\", got ", j.dump().substr(0, 80));
  HfAddedToken t;
  t.content = j["content"].get<std::string>();
  t.special = bool_field(j, "special", false, where);
  t.normalized = bool_field(j, "normalized", !t.special, where);
  t.single_word = bool_field(j, "single_word", false, where);
  t.lstrip = bool_field(j, "lstrip", false, where);
  t.rstrip = bool_field(j, "rstrip", false, where);
  return t;
}

}  // namespace

HfTokenizerSpec parse_tokenizer_json(const std::string& text, const std::string& source) {
  const Json j = parse_json(text, source);
  TITAN_CHECK(j.is_object(), source, ": a tokenizer.json is a JSON object, got ", j.type_name());
  if (j.contains("version"))
    TITAN_CHECK(j["version"] == "1.0", source, ": unknown tokenizer.json version ", j["version"].dump(),
                " (the tokenizers package writes \"1.0\")");
  TITAN_CHECK(j.contains("model"), source, ": no \"model\" (not a Hugging Face tokenizer.json?)");
  HfTokenizerSpec spec;
  read_model(j["model"], source, spec);

  const Json normalizer = j.value("normalizer", Json());
  TITAN_CHECK(normalizer.is_null(), source, ": normalizer '", type_of(normalizer),
              "' is not supported (titan's byte-level BPE normalizes nothing, as Llama 3's and GPT-2's files)");
  spec.pre_tokenizer = pre_tokenizer_steps(j.value("pre_tokenizer", Json()), source);
  const Json decoder = j.value("decoder", Json());
  TITAN_CHECK(type_of(decoder) == "ByteLevel", source, ": decoder ",
              decoder.is_null() ? std::string("null") : "'" + type_of(decoder) + "'",
              " is not supported: byte-level BPE decodes with ByteLevel");
  for (const char* key : {"truncation", "padding"})
    TITAN_CHECK(j.value(key, Json()).is_null(), source, ": '", key,
                "' is set; titan encodes whole documents and pads nothing (set it to null)");
  // post_processor (TemplateProcessing adding BOS, ByteLevel offsets) is not
  // applied: the callers of encode say whether they want BOS/EOS.

  const Json added = j.value("added_tokens", Json::array());
  TITAN_CHECK(added.is_array(), source, ": 'added_tokens' must be a list");
  for (size_t i = 0; i < added.size(); ++i)
    spec.added_tokens.push_back(added_token(added[i], source + ": added_tokens[" + std::to_string(i) + "]"));
  return spec;
}

HfTokenizerConfig parse_tokenizer_config(const std::string& text, const std::string& source) {
  const OrderedJson j = parse_json<OrderedJson>(text, source);
  TITAN_CHECK(j.is_object(), source, ": tokenizer_config.json is a JSON object, got ", j.type_name());
  HfTokenizerConfig cfg;

  // torchtitan's _get_token_from_config: a string, or a dict with "content".
  auto content_of = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    const Json& v = j[key];
    if (v.is_string()) return v.get<std::string>();
    TITAN_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), source, ": could not parse ",
                key, " (a string or an object with \"content\"), got ", v.dump().substr(0, 80));
    return v["content"].get<std::string>();
  };
  const std::optional<std::string> bos = content_of("bos_token"), eos = content_of("eos_token");

  // torchtitan's _process_special_token: the flags of a dict, else a plain
  // special token; add_special_tokens then makes every one special.
  auto add = [&](const std::string& content, const OrderedJson& conf, const std::string& where) {
    HfAddedToken t;
    t.content = content;
    t.normalized = false;  // AddedToken(content, special=True) leaves normalized at !special
    if (conf.is_object() && (conf.value("__type", OrderedJson()) == "AddedToken" || conf.contains("content"))) {
      t.single_word = bool_field(conf, "single_word", false, where);
      t.lstrip = bool_field(conf, "lstrip", false, where);
      t.rstrip = bool_field(conf, "rstrip", false, where);
      t.normalized = bool_field(conf, "normalized", true, where);
    }
    t.special = true;
    // torchtitan compares each token with bos_token first, then eos_token
    // (if ... elif): a token that is both is only ever BOS.
    if (content == bos) cfg.bos = content;
    else if (content == eos) cfg.eos = content;
    cfg.special_tokens.push_back(std::move(t));
  };
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token"})
    if (auto c = content_of(key)) add(*c, j[key], source + ": " + key);

  const OrderedJson decoder = j.value("added_tokens_decoder", OrderedJson::object());
  TITAN_CHECK(decoder.is_object(), source, ": added_tokens_decoder must be an object of id -> token");
  for (const auto& [id, conf] : decoder.items()) {
    if (!conf.is_object() || !conf.contains("content") || !conf["content"].is_string()) continue;  // as torchtitan
    const std::string where = source + ": added_tokens_decoder[\"" + id + "\"]";
    char* end = nullptr;
    std::strtoll(id.c_str(), &end, 10);
    TITAN_CHECK(!id.empty() && *end == '\0', where, ": the key must be an integer id");
    add(conf["content"].get<std::string>(), conf, where);
  }
  return cfg;
}

}  // namespace titan::data
