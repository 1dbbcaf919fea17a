// Resolution of experiment configs: section defaults <- preset/file overrides <- --set assignments, then
// type, range and cross-field validation with errors that name the key path.
#include "core/config/experiment_config.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/models/registry.h"
#include "core/report/report_ids.h"
#include "core/util/content_hash.h"
#include "core/util/errors.h"
#include "core/util/json_fields.h"
#include "core/util/paths.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

OptionSpec int_opt(std::string key, long long def, double lo, double hi, std::string help) {
  return {std::move(key), OptionType::Int, def, std::move(help), lo, hi, {}};
}
OptionSpec float_opt(std::string key, double def, double lo, double hi, std::string help) {
  return {std::move(key), OptionType::Float, def, std::move(help), lo, hi, {}};
}
OptionSpec choice_opt(std::string key, std::string def, std::vector<std::string> choices, std::string help) {
  return {std::move(key), OptionType::Choice, def, std::move(help), std::nullopt, std::nullopt, std::move(choices)};
}
OptionSpec string_opt(std::string key, std::string def, std::string help) {
  return {std::move(key), OptionType::String, def, std::move(help), std::nullopt, std::nullopt, {}};
}
OptionSpec bool_opt(std::string key, bool def, std::string help) {
  return {std::move(key), OptionType::Bool, def, std::move(help), std::nullopt, std::nullopt, {}};
}
/// Marks option `key` of `schema` as read only where `condition` holds (OptionSpec::read_when).
void add_read_condition(OptionSchema& schema, const std::string& key, OptionCondition condition) {
  for (auto& spec : schema)
    if (spec.key == key) spec.read_when.push_back(std::move(condition));
}

std::string with_origin(const std::string& origin, const std::string& message) {
  return origin.empty() ? message : origin + ": " + message;
}

const OptionSchema& section_schema(const std::string& section, const std::string& arch) {
  if (section == "data") return data_schema();
  if (section == "train") return train_schema();
  if (section == "run") return run_schema();
  return architecture(arch).options;
}

void cross_validate(const nlohmann::json& doc) {
  if (const auto device = doc.at("run").at("device").get<std::string>(); !is_device_name(device))
    throw ConfigError("run.device: '" + device + "' (expected cpu, cuda or cuda:N)");
  const auto& t = doc.at("train");
  if (t.at("min_lr").get<double>() > t.at("lr").get<double>())
    throw ConfigError("train.min_lr: " + t.at("min_lr").dump() + " is above train.lr " + t.at("lr").dump());
  // With train.epochs the step count comes from the data (epochs x batches per epoch), unknown here.
  if (t.at("epochs").get<long long>() == 0 && t.at("warmup_steps").get<long long>() > t.at("steps").get<long long>())
    throw ConfigError("train.warmup_steps: " + t.at("warmup_steps").dump() + " exceeds train.steps " +
                      t.at("steps").dump());
  const auto& d = doc.at("data");
  if ((d.at("source") == "file" || d.at("source") == "shards") && d.at("path").get<std::string>().empty())
    throw ConfigError("data.path: required when data.source is '" + d.at("source").get<std::string>() + "'");
  if (d.at("train_fraction").get<double>() + d.at("val_fraction").get<double>() >= 1.0)
    throw ConfigError("data.val_fraction: train_fraction + val_fraction must stay below 1 (the rest is the test split)");
  {  // sentence-pair sources (issue 5) and their tokenizers
    const auto source = d.at("source").get<std::string>();
    const auto tokenizer = d.at("tokenizer").get<std::string>();
    const bool pair_source = source == "entailment" || source == "pairs";
    const bool pair_tokenizer = tokenizer == "word" || tokenizer == "wordpiece";
    if (source == "pairs" && d.at("train_path").get<std::string>().empty())
      throw ConfigError("data.train_path: required when data.source is 'pairs'");
    if (source == "pairs" && d.at("val_path").get<std::string>().empty())
      throw ConfigError("data.val_path: required when data.source is 'pairs'");
    if (tokenizer == "sentencepiece" && d.at("tokenizer_model").get<std::string>().empty())
      throw ConfigError("data.tokenizer_model: required when data.tokenizer is 'sentencepiece' (a SentencePiece "
                        ".model file; `routelab-cli tokenizer train` makes one)");
    if (tokenizer == "wordpiece" && d.at("vocab_path").get<std::string>().empty())
      throw ConfigError("data.vocab_path: required when data.tokenizer is 'wordpiece' (a BERT vocab.txt)");
    if (pair_source && !pair_tokenizer)
      throw ConfigError("data.tokenizer: '" + tokenizer + "' is for language-modelling sources; data.source '" +
                        source + "' needs word or wordpiece");
    if (!pair_source && pair_tokenizer)
      throw ConfigError("data.tokenizer: '" + tokenizer + "' is for sentence pairs; data.source '" + source +
                        "' needs char, byte or sentencepiece");
  }
  const auto& m = doc.at("model");
  const auto& entry = architecture(m.at("arch").get<std::string>());
  if (entry.check) entry.check(m, "model");
  {  // the architecture's task (registry) must match the data source's
    const auto source = d.at("source").get<std::string>();
    const bool classification_source = source == "entailment" || source == "pairs";
    if (entry.task == Task::Classification && !classification_source)
      throw ConfigError("data.source: '" + source + "' is a language-modelling source, but model.arch '" + entry.id +
                        "' is a classification architecture (use data.source entailment or pairs)");
    if (entry.task != Task::Classification && classification_source)
      throw ConfigError("data.source: '" + source + "' is a sentence-pair classification source, but model.arch '" +
                        entry.id + "' is a language model (use tagat or vanilla-classifier)");
  }
}

}  // namespace

bool is_device_name(const std::string& name) {
  if (name == "cpu" || name == "cuda") return true;
  if (name.rfind("cuda:", 0) != 0 || name.size() == 5 || name.size() > 8) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

const OptionSchema& data_schema() {
  static const OptionSchema schema = [] {
    OptionSchema s = {
        choice_opt("source", "kjv", {"kjv", "file", "shards", "copy", "sort", "entailment", "pairs"},
                   "kjv: the embedded King James Bible corpus; file: any UTF-8 text file (data.path); shards: a "
                   "folder of token shards (data.path; `routelab-cli prepare` makes one; llm.c's and nanoGPT's load "
                   "too), memory-mapped; "
                   "copy/sort: the synthetic tasks of TSA §3.1; entailment: the embedded synthetic entailment "
                   "task of issue 5 (sentence-pair classification); pairs: sentence-pair files (data.train_path, "
                   "data.val_path; MultiNLI TSV or JSON lines)"),
        string_opt("path", "", "UTF-8 text file (data.source 'file') or folder of token shards ('shards')"),
        int_opt("shard_vocab", 0, 0, 1 << 24,
                "shards made elsewhere without a tokenizer (llm.c, nanoGPT): their vocabulary size (50257 for "
                "GPT-2's); 0: from RouteLab's manifest or data.tokenizer_model"),
        choice_opt("tokenizer", "char", {"char", "byte", "sentencepiece", "word", "wordpiece"},
                   "char: Unicode code points seen in the training split (+ unknown id); byte: 256 byte values; "
                   "sentencepiece: subwords of the SentencePiece model data.tokenizer_model (all three for language "
                   "modelling); word: words of the training pairs; wordpiece: BERT WordPiece over data.vocab_path "
                   "(both for sentence pairs)"),
        string_opt("tokenizer_model", "",
                   "SentencePiece .model file used when data.tokenizer is 'sentencepiece' (`routelab-cli tokenizer "
                   "train` makes one; the Llama-2 tokenizer.model works too); the run stores a copy"),
        float_opt("train_fraction", 0.8, 0.01, 0.98, "leading fraction of the text used for training"),
        float_opt("val_fraction", 0.1, 0.01, 0.98, "fraction after the training part used for validation"),
        int_opt("context", 128, 2, 1 << 20, "tokens per training window (sequence length T)"),
        int_opt("task_length", 10, 1, 512, "synthetic tasks: source sequence length"),
        int_opt("task_vocab", 32, 2, 4096, "synthetic tasks: number of symbols"),
        int_opt("task_train_examples", 10000, 1, 10000000, "synthetic tasks: training examples"),
        int_opt("task_eval_examples", 1000, 1, 10000000, "synthetic tasks: validation and test examples each"),
        int_opt("task_seed", 1234, 0, 2147483647, "synthetic tasks: generator seed"),
        int_opt("entailment_facts", 4, 2, 12,
                "synthetic entailment: most facts per premise (2 to this many; fewer is easier)"),
        float_opt("entailment_converse", 0.5, 0, 1,
                  "synthetic entailment: share of hypotheses phrased through the antonym (0: none, easier)"),
        int_opt("probe_chars", 96, 8, 4096, "characters of the fixed validation probe text used for routing views"),
        string_opt("train_path", "", "sentence pairs: training file (MultiNLI/GLUE TSV or JSON lines)"),
        string_opt("val_path", "", "sentence pairs: validation file"),
        string_opt("test_path", "", "sentence pairs: optional test file"),
        string_opt("vocab_path", "", "wordpiece tokenizer: BERT vocab.txt (one token per line)"),
        choice_opt("pair_format", "auto", {"auto", "tsv", "jsonl"},
                   "sentence-pair file format; auto: by extension (.jsonl/.json vs .tsv/.txt), else by content"),
        string_opt("labels", "entailment,neutral,contradiction",
                   "sentence pairs: class names in id order, matched case-insensitively against gold_label"),
        {"lowercase",
         OptionType::Bool,
         true,
         "word/wordpiece tokenizers: lower-case and strip accents",
         std::nullopt,
         std::nullopt,
         {}},
        int_opt("min_count", 1, 1, 1e9, "word tokenizer: words seen fewer times in the training pairs map to [UNK]"),
        int_opt("max_vocab", 0, 0, 1e9, "word tokenizer: largest vocabulary including 5 specials (0: no limit)"),
    };
    // What reads each key (unread_config_keys names one set elsewhere): the source's reader or the tokenizer.
    const auto read_when = [&s](const char* key, const char* on, std::vector<std::string> values) {
      add_read_condition(s, key, {on, std::move(values)});
    };
    read_when("path", "source", {"file", "shards"});
    for (const char* key : {"train_fraction", "val_fraction"})  // shards keep the split they were prepared with
      read_when(key, "source", {"kjv", "file"});
    for (const char* key : {"task_length", "task_vocab"}) read_when(key, "source", {"copy", "sort"});
    for (const char* key : {"task_train_examples", "task_eval_examples", "task_seed"})
      read_when(key, "source", {"copy", "sort", "entailment"});
    for (const char* key : {"entailment_facts", "entailment_converse"}) read_when(key, "source", {"entailment"});
    for (const char* key : {"pair_format", "labels", "train_path", "val_path", "test_path"})
      read_when(key, "source", {"pairs"});
    read_when("shard_vocab", "source", {"shards"});
    read_when("lowercase", "tokenizer", {"word", "wordpiece"});
    for (const char* key : {"min_count", "max_vocab"}) read_when(key, "tokenizer", {"word"});
    read_when("tokenizer_model", "tokenizer", {"sentencepiece"});
    read_when("vocab_path", "tokenizer", {"wordpiece"});
    return s;
  }();
  return schema;
}

namespace {

OptionSchema train_options() {
  return {
      int_opt("steps", 1000, 1, 1e9, "optimizer steps"),
      int_opt("epochs", 0, 0, 1e6,
              "passes over the training split (0: train.steps). Classification: steps = epochs x "
              "ceil(train examples / (batch_size x grad_accum)), with a validation pass after each epoch; language "
              "modelling (random windows): steps = epochs x ceil(train tokens / (batch_size x grad_accum x context))"),
      int_opt("batch_size", 32, 1, 1 << 20, "sequences per forward pass (a micro-batch when train.grad_accum > 1)"),
      int_opt(
          "grad_accum", 1, 1, 1 << 16,
          "gradient accumulation: micro-batches of train.batch_size sequences per optimizer step, so a step "
          "trains on grad_accum x batch_size sequences (the same update as one batch of that size, in fp32 "
          "within rounding; routing auxiliary losses are taken per micro-batch). Classifiers: batch_size examples a "
          "micro-batch"),
      float_opt("lr", 1e-3, 0, 1e6, "peak learning rate"),
      float_opt("min_lr", 1e-4, 0, 1e6, "learning rate at the end of the cosine decay"),
      int_opt("warmup_steps", 100, 0, 1e9, "linear warm-up steps from 0 to train.lr"),
      float_opt("weight_decay", 0.1, 0, 10, "AdamW decoupled weight decay (not applied to norms, biases, embeddings)"),
      float_opt("beta1", 0.9, 0, 0.999999, "AdamW beta1"),
      float_opt("beta2", 0.95, 0, 0.999999, "AdamW beta2"),
      float_opt("eps", 1e-8, 1e-12, 1, "AdamW epsilon"),
      float_opt("grad_clip", 1.0, 0, 1e6, "global gradient-norm clip (0 disables)"),
      int_opt("eval_every", 100, 1, 1e9, "steps between evaluations"),
      int_opt("eval_batches", 8, 1, 100000, "validation batches per evaluation"),
      int_opt("log_every", 10, 1, 1e9, "steps between stored training metrics"),
      int_opt("checkpoint_every", 500, 1, 1e9, "steps between checkpoints (a final one is always written)"),
      int_opt(
          "keep_checkpoints", 0, 0, 1e6,
          "checkpoints kept on the disk: once a newer one is stored, the oldest beyond this many are deleted (their "
          "files and rows; a resume falls back to the newest intact one of those kept). 0: every one"),
      bool_opt("checkpoint_async", true,
               "write each checkpoint on a thread of its own while training goes on: the step's weights, optimizer "
               "state and generators are copied to host memory first (one more copy of them held while it is "
               "written), and the checkpoint counts for resume once its file is on the disk; false: training waits "
               "for the disk"),
      choice_opt("precision", "fp32", {"fp32", "bf16"},
                 "fp32, or bf16 mixed precision (autocast: bf16 matmuls, fp32 master weights and reductions)"),
      int_opt("sync_every", 0, 0, 100000,
              "steps between reading the loss and gradient norm back to the host (0: every step on the CPU, every 32 "
              "on a GPU, so the GPU never waits for the host); log, evaluation and checkpoint steps always read"),
      bool_opt("tf32", true,
               "CUDA: fp32 matmuls and convolutions on TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation); "
               "no effect on the CPU"),
      bool_opt(
          "deterministic", false,
          "CUDA: deterministic kernels (cuBLAS fixed workspace, deterministic cuDNN, scatter and index ops), so a "
          "rerun or a resume repeats the losses bit for bit, at some speed; ops without a deterministic kernel warn "
          "once. The CPU is deterministic already"),
      bool_opt("cuda_graph", false,
               "CUDA: capture the training step once as a CUDA graph and replay it every step, so the host launches "
               "one graph instead of every kernel; architectures whose step has fixed shapes only (a run of another "
               "is refused, naming those that can). The first 3 steps run eagerly; the losses are those of an eager "
               "run"),
      int_opt("distill_from", 0, 0, 1e12,
              "distillation (Radial Networks' post-training route): the id of a stored language model in the same "
              "run store, the teacher; the new model starts from its weights (embedding, layers, head) and trains to "
              "match its next-token distribution (KL), beside the data's loss. 0: none"),
      float_opt("distill_weight", 1.0, 0, 1e6, "weight of KL(teacher || student) in the loss when distilling"),
      float_opt("distill_hidden", 0.0, 0, 1e6,
                "when distilling: weight of matching the teacher's layer outputs, the student's stream after its step "
                "s against the teacher's after its layer s (squared error relative to the teacher's norm, mean over "
                "steps and positions); 0: outputs only"),
      bool_opt("distill_layers", false,
               "when distilling: train the copied layers, embedding and head too (false: only what the teacher does "
               "not have, the router, trains)"),
  };
}

}  // namespace

const OptionSchema& train_schema() {
  static const OptionSchema schema = [] {
    OptionSchema s = train_options();
    add_read_condition(s, "steps", {"epochs", {"0"}});  // the epochs set the steps
    for (auto& spec : s) spec.cuda_only = spec.key == "tf32" || spec.key == "deterministic";
    for (const char* key : {"distill_weight", "distill_hidden", "distill_layers"})
      add_read_condition(s, key, {.key = "distill_from", .nonzero = true});
    return s;
  }();
  return schema;
}

namespace {

OptionSchema run_options() {
  return {
      string_opt("name", "", "run name (default: <arch>-<preset>)"),
      int_opt("seed", 1337, 0, 2147483647, "seed of initialisation, batches and dropout"),
      string_opt("device", "cpu", "compute device: cpu, cuda or cuda:N"),
      int_opt("threads", 0, 0, 1024, "CPU threads for Torch (0: all cores, fewer while other processes keep cores busy)"),
      string_opt("notes", "", "free text stored with the run"),
      choice_opt("backend", "auto", {"auto", "gloo", "nccl"},
                 "data parallel (started by torchrun, srun or --nproc): the c10d backend; auto is NCCL on CUDA, "
                 "Gloo on the CPU"),
      float_opt("dist_timeout_s", 600, 1, 86400,
                "data parallel: seconds a rank waits for the others (rendezvous, every collective) before the run "
                "fails; rank 0's evaluations and checkpoints (their host copies, with train.checkpoint_async) must fit "
                "in it"),
      float_opt("dist_bucket_mb", 25, 0.001, 4096, "data parallel: size of the gradient buckets summed over the ranks"),
      bool_opt("dist_overlap", true,
               "data parallel: send each gradient bucket while the backward pass runs (false: after it)"),
  };
}

}  // namespace

const OptionSchema& run_schema() {
  static const OptionSchema schema = [] {
    OptionSchema s = run_options();
    for (auto& spec : s) spec.data_parallel_only = spec.key == "backend" || spec.key.rfind("dist_", 0) == 0;
    return s;
  }();
  return schema;
}

void check_data_files(const ExperimentConfig& config) {
  const auto& d = config.data();
  const auto source = d.at("source").get<std::string>();
  const auto tokenizer = d.at("tokenizer").get<std::string>();
  const auto require = [&](const char* key, bool folder) {
    const auto path = d.value(key, std::string());
    if (path.empty()) return;  // required keys are checked by resolve_config
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status))
      throw ConfigError(std::string("data.") + key + ": " + path + ": no such " + (folder ? "folder" : "file"));
    if (folder && !std::filesystem::is_directory(status))
      throw ConfigError(std::string("data.") + key + ": " + path + " is a file; give the folder of token shards");
    if (!folder && std::filesystem::is_directory(status))
      throw ConfigError(std::string("data.") + key + ": " + path + " is a folder; give a file");
  };
  if (source == "file" || source == "shards") require("path", source == "shards");
  if (source == "pairs")
    for (const char* key : {"train_path", "val_path", "test_path"}) require(key, false);
  if (tokenizer == "sentencepiece") require("tokenizer_model", false);
  if (tokenizer == "wordpiece") require("vocab_path", false);
}

namespace {

/// unread_config_keys of a section: the options whose schema says when they are read, set away from their default
/// where a condition fails, or on the CPU or in one process where they are read on CUDA or by data parallel only.
void unread_marked_keys(const std::string& name, const OptionSchema& schema, const nlohmann::json& section,
                        const std::string& device, bool data_parallel, std::vector<std::string>& messages) {
  for (const auto& spec : schema) {
    const auto& value = section.at(spec.key);
    if (value == spec.default_value) continue;
    const auto head = name + "." + spec.key + ": " + option_value_text(value) + " is not read: ";
    if (const auto* failed = failed_condition(spec, section))
      messages.push_back(head + condition_value_text(*failed, name, section) + " (it is read with " +
                         condition_text(*failed, name) + ")");
    else if (spec.cuda_only && device.rfind("cuda", 0) != 0)
      messages.push_back(head + "run.device is '" + device + "' (it is read on a CUDA device)");
    else if (spec.data_parallel_only && !data_parallel)
      messages.push_back(head + "the run is one process (it is read by a data-parallel run: torchrun, srun or "
                                "--nproc)");
  }
}

}  // namespace

std::vector<std::string> unread_config_keys(const ExperimentConfig& config, bool data_parallel) {
  std::vector<std::string> messages;
  const auto device = config.run().at("device").get<std::string>();
  unread_marked_keys("model", architecture(config.arch()).options, config.model(), device, data_parallel, messages);
  unread_marked_keys("data", data_schema(), config.data(), device, data_parallel, messages);
  unread_marked_keys("train", train_schema(), config.train(), device, data_parallel, messages);
  unread_marked_keys("run", run_schema(), config.run(), device, data_parallel, messages);
  return messages;
}

std::string ExperimentConfig::hash() const {
  return content_hash(doc.dump());
}

ExperimentConfig resolve_config(const nlohmann::json& overrides, const std::vector<std::string>& sets,
                                const std::string& origin) {
  if (!overrides.is_object()) throw ConfigError(with_origin(origin, "the config must be a JSON object"));
  for (const auto& [key, value] : overrides.items()) {
    bool known = key == "description";
    for (const char* s : kConfigSections) known = known || key == s;
    if (!known) throw ConfigError(with_origin(origin, key + ": unknown section (expected model, data, train, run)"));
  }

  // Split "a.b=v" assignments; the architecture must be known before the model defaults are.
  std::vector<std::pair<std::string, std::string>> assignments;
  std::string arch = kBaselineArchitecture;
  if (overrides.contains("model") && overrides["model"].is_object() && overrides["model"].contains("arch")) {
    if (!overrides["model"]["arch"].is_string())
      throw ConfigError(with_origin(origin, "model.arch: expected a string"));
    arch = overrides["model"]["arch"].get<std::string>();
  }
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    const auto dot = s.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      throw ConfigError("--set " + s + ": expected section.key=value (e.g. model.n_layer=4)");
    assignments.emplace_back(s.substr(0, eq), s.substr(eq + 1));
    if (s.substr(0, eq) == "model.arch") arch = s.substr(eq + 1);
  }

  try {
    try {
      architecture(arch);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("model.arch: ") + e.what());
    }
    nlohmann::json doc = nlohmann::json::object();
    for (const char* section : kConfigSections) doc[section] = schema_defaults(section_schema(section, arch));
    doc["model"]["arch"] = arch;

    for (const char* section : kConfigSections) {
      if (!overrides.contains(section)) continue;
      nlohmann::json body = overrides[section];
      if (!body.is_object()) throw ConfigError(std::string(section) + ": expected an object");
      if (std::string(section) == "model") body.erase("arch");
      validate_section(body, section_schema(section, arch), section);
      doc[section].update(body);
    }
    for (const auto& [path, text] : assignments) {
      const auto dot = path.find('.');
      const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
      if (std::find(std::begin(kConfigSections), std::end(kConfigSections), section) == std::end(kConfigSections))
        throw ConfigError(path + ": unknown section (expected model, data, train, run)");
      if (path == "model.arch") continue;
      const OptionSpec* spec = find_option(section_schema(section, arch), key);
      if (!spec) throw ConfigError(path + ": unknown key");
      doc[section][key] = parse_value(text, *spec, path);
    }
    // Integral values given as 4.0 are stored as integers so the resolved document (and its hash) is canonical.
    for (const char* section : kConfigSections)
      for (const auto& spec : section_schema(section, arch))
        if (spec.type == OptionType::Int && doc[section].contains(spec.key))
          doc[section][spec.key] = doc[section][spec.key].get<long long>();
    cross_validate(doc);
    return ExperimentConfig{std::move(doc), origin};
  } catch (const ConfigError& e) {
    throw ConfigError(with_origin(origin, e.what()));
  }
}

ExperimentConfig config_from_resolved(const nlohmann::json& doc, const std::string& origin) {
  return resolve_config(doc, {}, origin);
}

nlohmann::json load_json_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(path + ": is a directory, not a config file");
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the config file");
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return nlohmann::json::parse(buf.str(), nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the offset of the error: report line and column.
    const std::string text = buf.str();
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw ConfigError(path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": invalid JSON");
  }
}

std::vector<PresetInfo> list_presets() {
  std::vector<PresetInfo> out;
  const fs::path dir = experiments_dir();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    PresetInfo info;
    info.name = entry.path().stem().string();
    info.path = entry.path().string();
    try {
      const auto doc = load_json_file(info.path);
      // Fields of another type are left to loading it, which names them.
      info.description = json_text(doc, "description", "");
      info.arch = json_text(doc.is_object() ? doc.value("model", nlohmann::json()) : nlohmann::json(), "arch",
                            kBaselineArchitecture);
    } catch (const ConfigError& e) {
      info.description = std::string("unreadable: ") + e.what();
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

nlohmann::json load_preset(const std::string& name) {
  // An earlier id ("smollm-dense") loads the renamed preset.
  const fs::path path = fs::path(experiments_dir()) / (current_id(name) + ".json");
  if (!fs::exists(path)) {
    std::string known;
    for (const auto& p : list_presets()) known += (known.empty() ? "" : ", ") + p.name;
    throw ConfigError("unknown preset '" + name + "' (known: " + known + ")");
  }
  return load_json_file(path.string());
}

ExperimentConfig preset_config(const std::string& name, const std::vector<std::string>& sets) {
  return resolve_config(load_preset(name), sets, name);
}

}  // namespace routelab
