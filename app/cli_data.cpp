// Data commands: `tokenizer train` (a SentencePiece BPE or unigram model from a corpus on disk, with progress),
// `tokenizer show` (a model's size, hash and how it splits a text), and `prepare` (a corpus tokenized on every core
// into memory-mappable token shards).
#include <cstdio>
#include <iostream>
#include <memory>

#include "app/cli_commands.h"
#include "app/cli_registration.h"
#include "core/bench/shard_bench.h"
#include "core/data/corpus_prepare.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/data/tokenizer_training.h"
#include "core/util/errors.h"

namespace routelab::cli {
namespace {

struct PrepareArgs {
  PrepareOptions options;
  std::string tokenizer;
};

struct ShowArgs {
  std::string model, text = "In the beginning God created the heaven and the earth.";
};

/// "12.3 MB of 45.6 MB (27%), 8.1 MB/s, 4 s left": one line, rewritten in place on a terminal.
void print_progress(const TokenizerTrainingProgress& p) {
  const double mb = p.bytes_read / 1e6, total = p.bytes_total / 1e6;
  const double rate = p.seconds > 0 ? mb / p.seconds : 0;
  const double left = rate > 0 ? (total - mb) / rate : 0;
  std::fprintf(stderr, "\rreading the corpus: %.1f MB of %.1f MB (%.0f%%), %.1f MB/s, %.0f s left, %lld lines   ", mb,
               total, total > 0 ? 100.0 * mb / total : 100.0, rate, left, static_cast<long long>(p.lines));
  if (p.bytes_read >= p.bytes_total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

int run_train(const TokenizerTrainingOptions& options) {
  const auto result = train_sentencepiece(options, print_progress);
  std::cout << "wrote " << result.path << ": " << options.type << ", " << result.vocab_size << " pieces, hash "
            << result.hash << "\n"
            << "read " << result.lines << " lines (" << result.bytes << " bytes) in " << result.read_seconds
            << " s, trained in " << result.train_seconds << " s\n"
            << "use it with: --set data.tokenizer=sentencepiece --set data.tokenizer_model=" << result.path << "\n";
  return 0;
}

void print_prepare_progress(const PrepareProgress& p) {
  const double mb = p.bytes_read / 1e6, total = p.bytes_total / 1e6;
  const double rate = p.seconds > 0 ? mb / p.seconds : 0;
  const double left = rate > 0 ? (total - mb) / rate : 0;
  std::fprintf(stderr,
               "\rtokenizing: %.1f MB of %.1f MB (%.0f%%), %.1f MB/s, %.0f s left, %lld tokens, %lld documents   ", mb,
               total, total > 0 ? 100.0 * mb / total : 100.0, rate, left, static_cast<long long>(p.tokens),
               static_cast<long long>(p.documents));
  std::fflush(stderr);
}

int run_prepare(PrepareArgs args) {
  if (args.tokenizer == "byte") {
    args.options.tokenizer = "byte";
  } else {
    args.options.tokenizer = "sentencepiece";
    args.options.tokenizer_model = args.tokenizer;
  }
  const SignalScope signals;  // Ctrl-C stops after the batch in flight, its progress saved
  args.options.cancel = signals.flag();
  const auto r = prepare_shards(args.options, print_prepare_progress);
  std::fprintf(stderr, "\n");
  if (r.stopped) {
    std::cout << "stopped after " << r.bytes << " of the corpus's bytes (" << r.train_tokens + r.val_tokens
              << " tokens); continue with the same command and --resume\n";
    return 130;
  }
  if (r.resumed) std::cout << "continued the unfinished preparation in " << r.folder << "\n";
  std::cout << "wrote " << r.shards << " shards and " << r.manifest << ": " << r.train_tokens << " training and "
            << r.val_tokens << " validation tokens from " << r.documents << " documents (" << r.bytes
            << " bytes) in " << r.seconds << " s (" << (r.seconds > 0 ? r.bytes / 1e6 / r.seconds : 0.0)
            << " MB/s)\n"
            << "train on it with: --set data.source=shards --set data.path=" << r.folder << "\n";
  return 0;
}

int run_shard_bench(const ShardBenchOptions& options) {
  std::cout << "bench shards: " << options.gigabytes << " GB of token shards in " << options.folder << ", "
            << options.batches << " batches of " << options.batch << " x " << options.context << "\n";
  const auto r = bench_shards(options);
  std::printf("%lld tokens in %lld shards, written at %.0f MB/s; sampling: %.0f batches/s, %.2fM tokens/s\n",
              static_cast<long long>(r.tokens), static_cast<long long>(r.shards), r.write_mb_per_s, r.batches_per_s,
              r.tokens_per_s / 1e6);
  std::printf("%-40s %12s %12s %10s\n", "phase", "anon MB", "file MB", "seconds");
  for (const auto& p : r.phases)
    std::printf("%-40s %12.1f %12.1f %10.2f\n", p.name.c_str(), p.rss_anon_mb, p.rss_file_mb, p.seconds);
  return 0;
}

int run_show(const ShowArgs& args) {
  const auto tokenizer = SentencePieceTokenizer::from_file(args.model);
  const auto ids = tokenizer->encode(args.text);
  std::cout << args.model << ": sentencepiece, " << tokenizer->vocab_size() << " pieces, hash " << tokenizer->hash()
            << ", bos " << tokenizer->bos_id() << ", eos " << tokenizer->eos_id() << "\n"
            << ids.size() << " tokens for " << args.text.size() << " bytes:";
  for (auto id : ids) std::cout << " [" << tokenizer->token_text(id) << "]";
  std::cout << "\nids:";
  for (auto id : ids) std::cout << " " << id;
  const bool round_trip = tokenizer->decode(ids) == args.text;
  std::cout << "\ndecodes to the text: " << (round_trip ? "yes" : "no") << "\n";
  return 0;
}

}  // namespace

void add_data_commands(CLI::App& app, CLI::App& bench, CommandAction& action) {
  auto* tok = app.add_subcommand("tokenizer", "subword tokenizers (SentencePiece): train one on a corpus, show one");
  tok->require_subcommand(1);

  auto train = std::make_shared<TokenizerTrainingOptions>();
  auto* train_cmd = tok->add_subcommand("train", "train a SentencePiece BPE or unigram model on a corpus on disk");
  train_cmd->add_option("--corpus", train->corpus, "text files, folders of them, or JSON lines (.jsonl)")->required();
  train_cmd->add_option("--vocab", train->vocab_size, "vocabulary size (pieces, bytes and specials included)")
      ->capture_default_str();
  train_cmd->add_option("--type", train->type, "bpe or unigram")
      ->check(CLI::IsMember({"bpe", "unigram"}))
      ->capture_default_str();
  train_cmd->add_option("--out", train->out, "the .model file to write")->required();
  train_cmd->add_option("--threads", train->threads, "training threads (0: every core)")->capture_default_str();
  train_cmd->add_option("--sample-lines", train->sample_lines, "train on this many lines drawn at random (0: all)")
      ->capture_default_str();
  train_cmd->add_option("--character-coverage", train->character_coverage,
                        "share of characters the vocabulary covers (1.0 for small alphabets)")
      ->capture_default_str();
  train_cmd->add_option("--json-field", train->json_field, "text field of JSON-lines documents")->capture_default_str();
  train_cmd->add_flag("!--no-byte-fallback", train->byte_fallback,
                      "unknown characters become <unk> instead of UTF-8 byte pieces");
  train_cmd->add_flag("!--quiet", train->log, "hide SentencePiece's own training log");
  train_cmd->callback([train, &action] { action = [train] { return run_train(*train); }; });

  auto prep = std::make_shared<PrepareArgs>();
  auto* prep_cmd = app.add_subcommand(
      "prepare",
      "tokenize a corpus on every core into token shards (llm.c's files plus a manifest) for data.source=shards");
  prep_cmd->add_option("--corpus", prep->options.corpus, "text files, folders of them, or JSON lines (.jsonl)")
      ->required();
  prep_cmd->add_option("--tokenizer", prep->tokenizer, "a SentencePiece .model file (`tokenizer train`), or byte")
      ->required();
  prep_cmd->add_option("--out", prep->options.out, "a new or empty folder for the shards")->required();
  prep_cmd->add_option("--val-fraction", prep->options.val_fraction,
                       "share of the corpus (its first documents, by bytes) kept for validation")
      ->capture_default_str();
  prep_cmd->add_option("--shard-tokens", prep->options.shard_tokens, "tokens per shard file")->capture_default_str();
  prep_cmd->add_option("--threads", prep->options.threads, "tokenizing threads (0: every core)")->capture_default_str();
  prep_cmd->add_option("--json-field", prep->options.json_field, "text field of JSON-lines documents")
      ->capture_default_str();
  prep_cmd->add_flag("!--no-bos", prep->options.bos, "no beginning-of-sequence id before each document");
  prep_cmd->add_option("--save-every", prep->options.save_every_s,
                       "seconds between saves of the progress --resume continues from (0: after every batch)")
      ->capture_default_str();
  prep_cmd->add_flag("--resume", prep->options.resume,
                     "continue the preparation stopped, failed or killed in --out (its progress is saved every "
                     "--save-every seconds), with the options it began with");
  prep_cmd->callback([prep, &action] { action = [prep] { return run_prepare(*prep); }; });

  auto shard_bench = std::make_shared<ShardBenchOptions>();
  auto* shard_cmd = bench.add_subcommand(
      "shards", "memory against corpus size: write a shard set, map it, sample windows, print resident memory");
  shard_cmd->add_option("--dir", shard_bench->folder, "a new or empty folder for the shards")->required();
  shard_cmd->add_option("--gb", shard_bench->gigabytes, "size of the shard set in GB")->capture_default_str();
  shard_cmd->add_option("--batches", shard_bench->batches, "batches drawn")->capture_default_str();
  shard_cmd->add_option("--batch", shard_bench->batch, "windows per batch")->capture_default_str();
  shard_cmd->add_option("--context", shard_bench->context, "tokens per window")->capture_default_str();
  shard_cmd->add_flag("--keep", shard_bench->keep, "keep the shards afterwards");
  shard_cmd->callback([shard_bench, &action] { action = [shard_bench] { return run_shard_bench(*shard_bench); }; });

  auto show = std::make_shared<ShowArgs>();
  auto* show_cmd = tok->add_subcommand("show", "a SentencePiece model's size and hash, and how it splits a text");
  show_cmd->add_option("MODEL", show->model, "the .model file")->required();
  show_cmd->add_option("--text", show->text, "text to split")->capture_default_str();
  show_cmd->callback([show, &action] { action = [show] { return run_show(*show); }; });
}

}  // namespace routelab::cli
