// `titan convert`: a Llama 3 between a titan (torchtitan-layout) checkpoint
// and a Hugging Face model folder, with the options of torchtitan's
// scripts/convert_checkpoint.py. The direction follows the input: a folder
// with config.json is HF (HF → titan), anything else a titan step-N folder.
// Checkpoints are read with titan's names (torchtitan 0.2's) or torchtitan
// 0.3's, and written with either (--naming). Every direction reads one
// tensor at a time (checkpoint/tensor_stream.hpp): no step holds the model.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "titan/checkpoint/dcp.hpp"
#include "titan/checkpoint/hf_config.hpp"
#include "titan/checkpoint/hf_folder.hpp"
#include "titan/models/llama3/state_dict_adapter.hpp"
#include "titan/checkpoint/tensor_stream.hpp"
#include "titan/checkpoint/torchtitan_v03.hpp"
#include "titan/launch/program.hpp"
#include "titan/metrics/format.hpp"
#include "titan/models/llama3/model_args.hpp"
#include "titan/util/error.hpp"
#include "titan/util/files.hpp"

namespace titan::cli {
namespace {

namespace files = titan::files;

constexpr const char* kConvertUsage =
    "usage: titan convert --checkpoint_path P --output_path O --model_flavor F\n"
    "                     [--model_type llama3] [--export_dtype float32|bfloat16|float16]\n"
    "                     [--output_format hf|checkpoint] [--naming titan|torchtitan-0.3] [--fuse_qkv]\n"
    "\n"
    "Converts a Llama 3 between a titan checkpoint and a Hugging Face model folder.\n"
    "If P has a config.json it is read as an HF folder and O becomes a titan\n"
    "checkpoint folder (step 0); otherwise P is a titan checkpoint folder (step-N)\n"
    "and O becomes an HF folder (config.json + safetensors, 5 GB shards).\n"
    "  --checkpoint_path P   input folder\n"
    "  --output_path O       output folder (created)\n"
    "  --model_type T        only llama3 (default)\n"
    "  --model_flavor F      debugmodel, 1B, 3B, 8B, 70B or 405B: the shapes the tensors must have\n"
    "  --export_dtype D      dtype of the written tensors (default float32)\n"
    "  --output_format F     for a checkpoint input: hf (default) or checkpoint (renamed, step 0)\n"
    "  --naming N            names in a written checkpoint: titan (torchtitan 0.2's: output.weight,\n"
    "                        attention.wq) or torchtitan-0.3 (lm_head.weight, attention.qkv_linear.wq);\n"
    "                        input checkpoints may use either\n"
    "  --fuse_qkv            with torchtitan-0.3: one fused attention.qkv_linear.wqkv per layer\n";

struct Options {
  std::string checkpoint_path, output_path, model_type = "llama3", model_flavor, export_dtype = "float32";
  std::string output_format = "hf", naming = "titan";
  bool fuse_qkv = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i], value;
    TITAN_CHECK(arg.rfind("--", 0) == 0, "titan convert: unexpected argument '", arg, "' (run 'titan convert --help')");
    if (arg == "--fuse_qkv") {
      o.fuse_qkv = true;
      continue;
    }
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
    else if (arg == "--output_format") o.output_format = value;
    else if (arg == "--naming") o.naming = value;
    else throw Error("titan convert: unknown option '" + arg + "' (run 'titan convert --help')");
  }
  for (const auto& [name, value] : {std::pair<const char*, const std::string&>{"--checkpoint_path", o.checkpoint_path},
                                    {"--output_path", o.output_path},
                                    {"--model_flavor", o.model_flavor}})
    TITAN_CHECK(!value.empty(), "titan convert: missing ", name, " (run 'titan convert --help')");
  TITAN_CHECK(o.model_type == "llama3", "titan convert: unknown --model_type '", o.model_type,
              "' (titan converts llama3 only)");
  TITAN_CHECK(o.output_format == "hf" || o.output_format == "checkpoint", "titan convert: --output_format '",
              o.output_format, "' is not hf or checkpoint");
  TITAN_CHECK(o.naming == "titan" || o.naming == "torchtitan-0.3", "titan convert: --naming '", o.naming,
              "' is not titan or torchtitan-0.3");
  TITAN_CHECK(!o.fuse_qkv || o.naming == "torchtitan-0.3", "titan convert: --fuse_qkv needs --naming torchtitan-0.3");
  // A conversion writes a new model; it never replaces one already saved
  // (a checkpoint written over by a bf16 export's values, an HF folder by
  // another flavor's). An empty folder made for it is fine.
  TITAN_CHECK(!files::exists(o.output_path) || (files::is_directory(o.output_path) &&
                                                 files::list_files(o.output_path).empty()),
              "titan convert: --output_path ", o.output_path, " already exists and is not empty; titan convert does "
              "not replace a saved model (remove it or choose another path)");
  return o;
}

// The tensors must have the flavor's shapes: converting with the wrong
// flavor would write a config that does not describe the weights. Checked
// on the layout, before any value is read.
void check_flavor(const checkpoint::TensorStream& state, const models::llama3::ModelArgs& flavor,
                  const Options& o) {
  try {
    models::llama3::check_titan_state(state.layout, flavor, o.checkpoint_path);
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

// A checkpoint's model tensors under titan's names, whichever naming it was
// written with, each read when asked for.
checkpoint::TensorStream checkpoint_titan_names(const Options& o, const models::llama3::ModelArgs& flavor) {
  checkpoint::TensorStream state = checkpoint::checkpoint_stream(checkpoint::open_checkpoint(o.checkpoint_path));
  if (!checkpoint::has_torchtitan_v03_names(state.layout)) return state;
  try {
    return checkpoint::from_torchtitan_v03(state, flavor);
  } catch (const Error& e) {
    throw Error("titan convert: " + o.checkpoint_path + " (torchtitan 0.3 names), flavor " + o.model_flavor + ": " +
                e.what());
  }
}

// A large model converts for minutes (a 405B one writes 1.6 TB in fp32):
// every 10 s, a line on stderr says how far the writer has come.
checkpoint::TensorStream reporting_progress(checkpoint::TensorStream stream) {
  return checkpoint::with_progress(std::move(stream), /*interval_s=*/10, [](const checkpoint::StreamProgress& p) {
    std::fprintf(stderr, "titan convert: %lld of %lld tensors, %s of %s (%.0f%%), %s\n",
                 static_cast<long long>(p.tensors_read), static_cast<long long>(p.tensors),
                 metrics::human_bytes(static_cast<double>(p.bytes_read)).c_str(),
                 metrics::human_bytes(static_cast<double>(p.bytes)).c_str(),
                 100.0 * static_cast<double>(p.bytes_read) / static_cast<double>(std::max<int64_t>(p.bytes, 1)),
                 metrics::duration(p.seconds).c_str());
  });
}

// Writes a step-0 checkpoint in the naming and dtype asked for, one tensor at a time.
void write_checkpoint_named(const Options& o, const checkpoint::TensorStream& titan_state,
                            const models::llama3::ModelArgs& flavor, at::ScalarType dtype) {
  checkpoint::write_model_checkpoint(
      o.output_path,
      reporting_progress(checkpoint::cast_stream(o.naming == "torchtitan-0.3"
                                                     ? checkpoint::to_torchtitan_v03(titan_state, flavor, o.fuse_qkv)
                                                     : titan_state,
                                                 dtype)),
      /*step=*/0);
}

std::string naming_note(const Options& o) {
  return o.naming == "titan" ? "" : "; " + o.naming + " names" + (o.fuse_qkv ? " with fused wqkv" : "");
}

int hf_to_titan(const Options& o, const models::llama3::ModelArgs& flavor, at::ScalarType dtype) {
  checkpoint::HfFolderStream hf = checkpoint::open_hf_folder(o.checkpoint_path);
  checkpoint::TensorStream& state = hf.tensors;
  if (!hf.tied_embeddings && flavor.tie_word_embeddings) {
    models::llama3::ModelArgs untied = flavor;
    untied.tie_word_embeddings = false;
    check_flavor(state, untied, o);  // wrong shapes are the clearer message
    throw Error("titan convert: " + o.checkpoint_path + " has its own lm_head.weight (tie_word_embeddings false) " +
                "but flavor " + o.model_flavor + " ties the output to the embedding; titan does not merge two " +
                "weights into one");
  }
  std::string tie_note;
  if (hf.tied_embeddings && !flavor.tie_word_embeddings) {
    // The flavor keeps a separate output: it starts as a copy of the shared
    // weight (read again from the folder when its turn comes).
    state.layout["output.weight"] = state.layout.at("tok_embeddings.weight");
    state.read = [read = std::move(state.read)](const std::string& name) {
      return read(name == "output.weight" ? "tok_embeddings.weight" : name);
    };
    tie_note = "; tied embeddings untied for this flavor (output.weight copied from the embedding)";
  } else if (hf.tied_embeddings) {
    tie_note = "; tied embeddings (one tensor, no output.weight)";
  }
  check_flavor(state, flavor, o);
  note_config_differences(hf.args, flavor, o);
  write_checkpoint_named(o, state, flavor, dtype);
  std::printf("converted HF folder %s -> titan checkpoint %s (llama3 %s, %zu tensors, %lld parameters, %s)%s%s\n",
              o.checkpoint_path.c_str(), o.output_path.c_str(), o.model_flavor.c_str(), state.layout.size(),
              static_cast<long long>(state.numel()), checkpoint::hf_dtype_name(dtype).c_str(), tie_note.c_str(),
              naming_note(o).c_str());
  return 0;
}

int titan_to_titan(const Options& o, const models::llama3::ModelArgs& flavor, at::ScalarType dtype) {
  const checkpoint::TensorStream state = checkpoint_titan_names(o, flavor);
  check_flavor(state, flavor, o);
  write_checkpoint_named(o, state, flavor, dtype);
  std::printf("converted titan checkpoint %s -> titan checkpoint %s (llama3 %s, %zu tensors, %lld parameters, %s)%s\n",
              o.checkpoint_path.c_str(), o.output_path.c_str(), o.model_flavor.c_str(), state.layout.size(),
              static_cast<long long>(state.numel()), checkpoint::hf_dtype_name(dtype).c_str(),
              o.naming == "titan" ? "; titan names" : naming_note(o).c_str());
  return 0;
}

int titan_to_hf(const Options& o, const models::llama3::ModelArgs& flavor, at::ScalarType dtype) {
  TITAN_CHECK(o.naming == "titan", "titan convert: --naming ", o.naming,
              " names a checkpoint's tensors; an HF folder has HF's (add --output_format checkpoint)");
  // A flavor's max_seq_len is titan's default RoPE table (2048), not the
  // model's context; transformers expects max_position_embeddings above the
  // scaling's original context, so write the context the scaling stretches
  // to (original x factor).
  models::llama3::ModelArgs args = flavor;
  if (args.rope_scaling.enabled)
    args.max_seq_len = std::max(args.max_seq_len, static_cast<int64_t>(args.rope_scaling.original_max_position *
                                                                       args.rope_scaling.factor));
  const checkpoint::TensorStream state = checkpoint_titan_names(o, flavor);
  check_flavor(state, flavor, o);
  checkpoint::write_hf_folder(o.output_path, reporting_progress(state), args, dtype);
  std::printf("converted titan checkpoint %s -> HF folder %s (llama3 %s, %zu tensors, %lld parameters, %s)\n",
              o.checkpoint_path.c_str(), o.output_path.c_str(), o.model_flavor.c_str(), state.layout.size(),
              static_cast<long long>(state.numel()), checkpoint::hf_dtype_name(dtype).c_str());
  return 0;
}

}  // namespace

static int cmd_convert(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    for (int i = 2; i < argc; ++i)
      if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
        std::fputs(kConvertUsage, stdout);
        return 0;
      }
    const Options o = parse(argc, argv);
    const models::llama3::ModelArgs flavor = models::llama3::flavor_args(o.model_flavor);
    const at::ScalarType dtype = checkpoint::parse_hf_dtype(o.export_dtype);
    if (checkpoint::is_hf_folder(o.checkpoint_path)) return hf_to_titan(o, flavor, dtype);
    return o.output_format == "checkpoint" ? titan_to_titan(o, flavor, dtype) : titan_to_hf(o, flavor, dtype);
  });
}

}  // namespace titan::cli

TITAN_COMMAND("convert", titan::cli::cmd_convert,
              "convert a Llama 3 between a titan checkpoint and a Hugging Face folder");
