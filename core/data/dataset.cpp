// make_dataset: the resolved `data` config section to a dataset, with its cross-field checks; and the default
// corpus (the King James Bible from Debian's bible-kjv), generated once into the data dir.
#include "core/data/dataset.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <spdlog/fmt/fmt.h>

#include "core/data/shard_dataset.h"
#include "core/data/synthetic_tasks.h"
#include "core/data/text_corpus.h"
#include "core/data/detail.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/paths.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

/// Pretty-printed at an explicit width: without -l, bible breaks lines at $COLUMNS - 1, which would make the
/// corpus depend on the terminal that first generated it. 79 is its own default.
constexpr const char* kBibleCommand = "bible -l 79 'Genesis 1:1-Revelation 22:21' </dev/null 2>/dev/null";
constexpr std::uintmax_t kMinCorpusBytes = 1 << 20;
const char* const kBibleHint =
    "the default corpus needs Debian's bible-kjv package (packaging/install-deps.sh installs it): ";

using detail::get;
using detail::require;

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

/// Runs `bible` into a temporary file beside `target`, checks it, and renames it into place (atomic, so a
/// concurrent reader sees either no corpus or the whole one).
void generate_kjv(const fs::path& target) {
  if (!on_path("bible")) throw DataError(std::string(kBibleHint) + "`bible` was not found on PATH");
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) throw DataError(target.parent_path().string() + ": cannot create (" + ec.message() + ")");

  std::string temp_name = (target.parent_path() / (target.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(temp_name.data());
  if (fd < 0) throw DataError(temp_name + ": cannot create (" + std::strerror(errno) + ")");
  const fs::path temp(temp_name);
  auto fail = [&](const std::string& message) -> DataError {
    fs::remove(temp, ec);
    return DataError(message);
  };
  std::FILE* out = ::fdopen(fd, "wb");
  if (!out) {
    ::close(fd);
    throw fail(temp_name + ": cannot write (" + std::strerror(errno) + ")");
  }
  std::FILE* pipe = ::popen(kBibleCommand, "r");
  if (!pipe) {
    std::fclose(out);
    throw fail(std::string(kBibleHint) + "cannot run `bible` (" + std::strerror(errno) + ")");
  }
  char buffer[1 << 16];
  std::size_t got = 0;
  bool write_failed = false;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) {
    if (std::fwrite(buffer, 1, got, out) != got) write_failed = true;
  }
  const int status = ::pclose(pipe);
  if (std::fclose(out) != 0) write_failed = true;
  if (write_failed) throw fail(temp_name + ": cannot write (" + std::strerror(errno) + ")");
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw fail(std::string(kBibleHint) + "`" + kBibleCommand + "` failed (exit status " +
               std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status) + ")");
  }
  const std::uintmax_t size = fs::file_size(temp, ec);
  if (ec || size < kMinCorpusBytes) {
    throw fail(std::string(kBibleHint) + "`bible` printed only " + std::to_string(ec ? 0 : size) +
               " bytes; is its data file (bible-kjv-text) installed?");
  }
  fs::rename(temp, target, ec);
  if (ec) throw fail(target.string() + ": cannot write (" + ec.message() + ")");
  logger("data")->info("generated the default corpus {} ({} bytes) with bible-kjv", target.string(), size);
}

/// The options are checked before the path is resolved, so a bad config never triggers the corpus generation.
std::unique_ptr<LmDataset> make_corpus(const nlohmann::json& data, const std::string& source,
                                       const nlohmann::json& stored_tokenizer) {
  TextCorpusOptions options;
  options.tokenizer = get<std::string>(data, "tokenizer");
  options.stored_tokenizer = stored_tokenizer;
  options.train_fraction = get<double>(data, "train_fraction");
  options.val_fraction = get<double>(data, "val_fraction");
  options.context = get<std::int64_t>(data, "context");
  options.probe_chars = get<std::int64_t>(data, "probe_chars");
  require(options.tokenizer == "char" || options.tokenizer == "byte" || options.tokenizer == "sentencepiece",
          "tokenizer", "unknown tokenizer '" + options.tokenizer + "' (expected char, byte or sentencepiece)");
  if (options.tokenizer == "sentencepiece") {
    options.tokenizer_model = data.value("tokenizer_model", std::string());
    require(!options.tokenizer_model.empty() || !stored_tokenizer.is_null(), "tokenizer_model",
            "required when data.tokenizer is 'sentencepiece' (a SentencePiece .model file)");
  }
  require(options.train_fraction > 0 && options.train_fraction < 1, "train_fraction",
          fmt::format("{}", options.train_fraction) + " must be in (0, 1)");
  require(options.val_fraction > 0 && options.val_fraction < 1, "val_fraction",
          fmt::format("{}", options.val_fraction) + " must be in (0, 1)");
  require(options.train_fraction + options.val_fraction < 1, "val_fraction",
          "train_fraction + val_fraction = " +
              fmt::format("{}", options.train_fraction + options.val_fraction) +
              " must be < 1 (the rest is the test split)");
  require(options.context >= 1, "context", std::to_string(options.context) + " must be >= 1");
  require(options.probe_chars >= 1, "probe_chars", std::to_string(options.probe_chars) + " must be >= 1");
  if (source == "file") {
    options.path = get<std::string>(data, "path");
    require(!options.path.empty(), "path", "required when data.source is 'file'");
  } else {
    options.path = default_corpus_path();
  }
  return std::make_unique<TextCorpusDataset>(options);
}

std::unique_ptr<LmDataset> make_shards(const nlohmann::json& data, const nlohmann::json& stored_tokenizer) {
  ShardDatasetOptions options;
  options.path = get<std::string>(data, "path");
  options.context = get<std::int64_t>(data, "context");
  options.probe_chars = get<std::int64_t>(data, "probe_chars");
  options.tokenizer = get<std::string>(data, "tokenizer");
  options.tokenizer_model = data.value("tokenizer_model", std::string());
  options.vocab = data.value("shard_vocab", std::int64_t{0});
  options.stored_tokenizer = stored_tokenizer;
  require(!options.path.empty(), "path", "required when data.source is 'shards' (a folder of token shards)");
  require(options.context >= 1, "context", std::to_string(options.context) + " must be >= 1");
  return std::make_unique<ShardDataset>(options);
}

std::unique_ptr<LmDataset> make_task(const nlohmann::json& data, SyntheticTask task) {
  SyntheticTaskOptions options;
  options.task = task;
  options.length = get<std::int64_t>(data, "task_length");
  options.vocab = get<std::int64_t>(data, "task_vocab");
  options.train_examples = get<std::int64_t>(data, "task_train_examples");
  options.eval_examples = get<std::int64_t>(data, "task_eval_examples");
  options.seed = static_cast<std::uint64_t>(get<std::int64_t>(data, "task_seed"));
  require(options.length >= 1, "task_length", std::to_string(options.length) + " must be >= 1");
  require(options.vocab >= 1, "task_vocab", std::to_string(options.vocab) + " must be >= 1");
  require(options.train_examples >= 1, "task_train_examples",
          std::to_string(options.train_examples) + " must be >= 1");
  require(options.eval_examples >= 1, "task_eval_examples", std::to_string(options.eval_examples) + " must be >= 1");
  return std::make_unique<SyntheticTaskDataset>(options);
}

}  // namespace

std::string to_string(Split split) {
  switch (split) {
    case Split::Train: return "train";
    case Split::Val: return "val";
    case Split::Test: return "test";
  }
  return "unknown";
}

std::unique_ptr<LmDataset> make_dataset(const nlohmann::json& data, const nlohmann::json& stored_tokenizer) {
  if (!data.is_object()) throw ConfigError("data: expected an object");
  const auto source = get<std::string>(data, "source");
  if (source == "kjv" || source == "file") return make_corpus(data, source, stored_tokenizer);
  if (source == "shards") return make_shards(data, stored_tokenizer);
  if (source == "copy") return make_task(data, SyntheticTask::Copy);
  if (source == "sort") return make_task(data, SyntheticTask::Sort);
  if (source == "entailment" || source == "pairs") {
    throw ConfigError("data.source: '" + source +
                      "' holds sentence pairs for classification models (tagat, vanilla-classifier), not a "
                      "language-modelling corpus");
  }
  throw ConfigError("data.source: unknown source '" + source + "' (expected kjv, file, shards, copy or sort)");
}

std::int64_t dataset_context(const nlohmann::json& data) {
  if (!data.is_object()) throw ConfigError("data: expected an object");
  const auto source = get<std::string>(data, "source");
  if (source == "copy" || source == "sort")
    return SyntheticTaskDataset::context_of(get<std::int64_t>(data, "task_length"));
  if (source == "kjv" || source == "file" || source == "shards") return get<std::int64_t>(data, "context");
  throw ConfigError("data.source: '" + source + "' is not a language-modelling source (kjv, file, shards, copy, sort)");
}

std::string default_corpus_path() {
  const fs::path target = fs::path(data_dir()) / "corpora" / "kjv.txt";
  std::error_code ec;
  if (fs::is_regular_file(target, ec) && fs::file_size(target, ec) >= kMinCorpusBytes) return target.string();
  generate_kjv(target);
  return target.string();
}

}  // namespace routelab
