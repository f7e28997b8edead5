// `titan convert`: a Llama 3 between a titan (torchtitan-layout) checkpoint
// and a Hugging Face model folder, with the options of torchtitan's
// scripts/convert_checkpoint.py. The direction follows the input: a folder
// with config.json is HF (HF → titan), anything else a titan step-N folder.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/checkpoint/hf_llama.hpp"
#include "titan/launch/program.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/util/error.hpp"

namespace titan::cli {
namespace {

constexpr const char* kUsage =
    "usage: titan convert --checkpoint_path P --output_path O --model_flavor F\n"
    "                     [--model_type llama3] [--export_dtype float32|bfloat16|float16]\n"
    "\n"
    "Converts a Llama 3 between a titan checkpoint and a Hugging Face model folder.\n"
    "If P has a config.json it is read as an HF folder and O becomes a titan\n"
    "checkpoint folder (step 0); otherwise P is a titan checkpoint folder (step-N)\n"
    "and O becomes an HF folder (config.json + safetensors, 5 GB shards).\n"
    "  --checkpoint_path P   input folder\n"
    "  --output_path O       output folder (created)\n"
    "  --model_type T        only llama3 (default)\n"
    "  --model_flavor F      debugmodel, 1B, 3B, 8B, 70B or 405B: the shapes the tensors must have\n"
    "  --export_dtype D      dtype of the written tensors (default float32)\n";

struct Options {
  std::string checkpoint_path, output_path, model_type = "llama3", model_flavor, export_dtype = "float32";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i], value;
    TITAN_CHECK(arg.rfind("--", 0) == 0, "titan convert: unexpected argument '", arg, "' (run 'titan convert --help')");
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else {
      TITAN_CHECK(i + 1 < argc, "titan convert: ", arg, " needs a value");
      value = argv[++i];
    }
    if (arg == "--checkpoint_path") o.checkpoint_path = value;
    else if (arg == "--output_path") o.output_path = value;
    else if (arg == "--model_type") o.model_type = value;
    else if (arg == "--model_flavor") o.model_flavor = value;
    else if (arg == "--export_dtype") o.export_dtype = value;
    else throw Error("titan convert: unknown option '" + arg + "' (run 'titan convert --help')");
  }
  for (const auto& [name, value] : {std::pair<const char*, const std::string&>{"--checkpoint_path", o.checkpoint_path},
                                    {"--output_path", o.output_path},
                                    {"--model_flavor", o.model_flavor}})
    TITAN_CHECK(!value.empty(), "titan convert: missing ", name, " (run 'titan convert --help')");
  TITAN_CHECK(o.model_type == "llama3", "titan convert: unknown --model_type '", o.model_type,
              "' (titan converts llama3 only)");
  return o;
}

// The tensors must have the flavor's shapes: converting with the wrong
// flavor would write a config that does not describe the weights.
void check_flavor(const checkpoint::StateDict& state, const models::llama3::ModelArgs& flavor,
                  const Options& o) {
  try {
    checkpoint::check_titan_state(state, flavor, o.checkpoint_path);
  } catch (const Error& e) {
    throw Error("titan convert: --model_flavor " + o.model_flavor + " does not match the checkpoint: " + e.what());
  }
}

std::string rope_str(const models::llama3::ModelArgs& a) {
  std::string s = "theta " + std::to_string(a.rope_theta);
  if (!a.rope_scaling.enabled) return s + ", no scaling";
  return s + ", llama3 scaling factor " + std::to_string(a.rope_scaling.factor) + " low " +
         std::to_string(a.rope_scaling.low_freq_factor) + " high " + std::to_string(a.rope_scaling.high_freq_factor) +
         " original " + std::to_string(a.rope_scaling.original_max_position);
}

// The flavor fixes shapes; RoPE and the norm epsilon are not in the tensors,
// and titan will use the flavor's. Say so when the HF config disagrees (say,
// a Llama 3.0 8B without the 3.1 scaling), since the logits would differ.
void note_config_differences(const models::llama3::ModelArgs& config, const models::llama3::ModelArgs& flavor,
                             const Options& o) {
  if (rope_str(config) != rope_str(flavor))
    std::fprintf(stderr, "note: %s/config.json has RoPE %s; flavor %s (which titan will use) has %s\n",
                 o.checkpoint_path.c_str(), rope_str(config).c_str(), o.model_flavor.c_str(), rope_str(flavor).c_str());
  if (config.norm_eps != flavor.norm_eps)
    std::fprintf(stderr, "note: %s/config.json has rms_norm_eps %g; flavor %s (which titan will use) has %g\n",
                 o.checkpoint_path.c_str(), config.norm_eps, o.model_flavor.c_str(), flavor.norm_eps);
}

int64_t param_count(const checkpoint::StateDict& state) {
  int64_t n = 0;
  for (const auto& [name, t] : state) n += t.numel();
  return n;
}

int hf_to_titan(const Options& o, const models::llama3::ModelArgs& flavor, at::ScalarType dtype) {
  checkpoint::HfCheckpoint hf = checkpoint::read_hf_folder(o.checkpoint_path);
  check_flavor(hf.titan_state, flavor, o);
  note_config_differences(hf.args, flavor, o);
  for (auto& [name, t] : hf.titan_state) t = t.to(dtype);
  checkpoint::write_model_checkpoint(o.output_path, hf.titan_state, /*step=*/0);
  std::printf("converted HF folder %s -> titan checkpoint %s (llama3 %s, %zu tensors, %lld parameters, %s)%s\n",
              o.checkpoint_path.c_str(), o.output_path.c_str(), o.model_flavor.c_str(), hf.titan_state.size(),
              static_cast<long long>(param_count(hf.titan_state)), checkpoint::hf_dtype_name(dtype).c_str(),
              hf.tied_embeddings ? "; tied embeddings untied (output.weight copied from the embedding)" : "");
  return 0;
}

int titan_to_hf(const Options& o, const models::llama3::ModelArgs& flavor, at::ScalarType dtype) {
  checkpoint::StateDict state = checkpoint::read_model_tensors(o.checkpoint_path);
  check_flavor(state, flavor, o);
  // A flavor's max_seq_len is titan's default RoPE table (2048), not the
  // model's context; transformers expects max_position_embeddings above the
  // scaling's original context, so write the context the scaling stretches
  // to (original x factor).
  models::llama3::ModelArgs args = flavor;
  if (args.rope_scaling.enabled)
    args.max_seq_len = std::max(args.max_seq_len, static_cast<int64_t>(args.rope_scaling.original_max_position *
                                                                       args.rope_scaling.factor));
  checkpoint::write_hf_folder(o.output_path, state, args, dtype);
  std::printf("converted titan checkpoint %s -> HF folder %s (llama3 %s, %zu tensors, %lld parameters, %s)\n",
              o.checkpoint_path.c_str(), o.output_path.c_str(), o.model_flavor.c_str(), state.size(),
              static_cast<long long>(param_count(state)), checkpoint::hf_dtype_name(dtype).c_str());
  return 0;
}

}  // namespace

static int cmd_convert(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    for (int i = 2; i < argc; ++i)
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        std::fputs(kUsage, stdout);
        return 0;
      }
    const Options o = parse(argc, argv);
    const models::llama3::ModelArgs flavor = models::llama3::flavor_args(o.model_flavor);
    const at::ScalarType dtype = checkpoint::parse_hf_dtype(o.export_dtype);
    return checkpoint::is_hf_folder(o.checkpoint_path) ? hf_to_titan(o, flavor, dtype)
                                                       : titan_to_hf(o, flavor, dtype);
  });
}

}  // namespace titan::cli

TITAN_COMMAND("convert", titan::cli::cmd_convert,
              "convert a Llama 3 between a titan checkpoint and a Hugging Face folder");
