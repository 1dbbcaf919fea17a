// Tokenizers for sentence pairs (issue 5): a word-level vocabulary built from the training split and BERT's
// WordPiece over a vocab.txt file, both after BERT's basic tokenization; and the `[CLS] a [SEP] b [SEP]` pair
// layout with longest-first truncation. Both serialize to JSON so a run's checkpoint can be reloaded.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

inline constexpr const char* kPadToken = "[PAD]";
inline constexpr const char* kUnkToken = "[UNK]";
inline constexpr const char* kClsToken = "[CLS]";
inline constexpr const char* kSepToken = "[SEP]";
inline constexpr const char* kMaskToken = "[MASK]";

/// BERT's BasicTokenizer: drops NUL, U+FFFD and control characters, maps Unicode white space to spaces, puts
/// spaces around CJK ideographs, splits on white space, and splits every punctuation character into its own
/// token. With `lowercase`, also lower-cases and strips accents (as bert-base-uncased does). Unicode case and
/// accent tables cover Latin-1, Latin Extended-A, Greek and Cyrillic plus the combining marks U+0300–U+036F
/// (not the full Unicode database). Throws DataError on invalid UTF-8.
std::vector<std::string> basic_tokenize(std::string_view text, bool lowercase);

/// A vocabulary of strings with the five specials [PAD] [UNK] [CLS] [SEP] [MASK]; a special missing from the
/// given vocabulary is appended at its end. Ids are positions in vocab().
class PairTokenizer {
 public:
  virtual ~PairTokenizer() = default;
  virtual std::string kind() const = 0;  ///< "word" or "wordpiece"

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(vocab_.size()); }
  bool lowercase() const { return lowercase_; }
  std::int64_t pad_id() const { return pad_id_; }
  std::int64_t unk_id() const { return unk_id_; }
  std::int64_t cls_id() const { return cls_id_; }
  std::int64_t sep_id() const { return sep_id_; }
  std::int64_t mask_id() const { return mask_id_; }
  const std::vector<std::string>& vocab() const { return vocab_; }
  /// The id of a vocabulary entry, or -1 when absent.
  std::int64_t id_of(const std::string& token) const;
  /// The vocabulary entry of `id` ("##ing" for a WordPiece continuation); DataError when out of range.
  const std::string& token_text(std::int64_t id) const;

  /// Ids of `text` without specials (basic tokenization, then the kind's word-to-ids step).
  std::vector<std::int64_t> encode(std::string_view text) const;

  /// {"kind": ..., "lowercase": ..., "vocab": [every entry in id order]}.
  nlohmann::json to_json() const;
  /// The inverse of to_json(); DataError naming what is wrong with the document.
  static std::unique_ptr<PairTokenizer> from_json(const nlohmann::json& doc);

 protected:
  PairTokenizer(std::vector<std::string> vocab, bool lowercase);
  /// Appends the ids of one basic token.
  virtual void encode_word(const std::string& word, std::vector<std::int64_t>& out) const = 0;

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, std::int64_t> ids_;  ///< first occurrence wins for duplicates
  bool lowercase_;
  std::int64_t pad_id_ = 0, unk_id_ = 0, cls_id_ = 0, sep_id_ = 0, mask_id_ = 0;
};

struct WordTokenizerOptions {
  bool lowercase = true;
  std::int64_t min_count = 1;  ///< words seen fewer times in the training texts map to [UNK]
  std::int64_t max_vocab = 0;  ///< largest vocabulary including the 5 specials (0: no limit; otherwise >= 6)
};

/// Word-level: one id per basic token; specials first (ids 0..4 = [PAD] [UNK] [CLS] [SEP] [MASK]), then the
/// training words by descending count, ties in byte order. Unknown words map to [UNK].
class WordTokenizer final : public PairTokenizer {
 public:
  /// Counts the basic tokens of `training_texts`. Throws DataError on invalid UTF-8.
  static WordTokenizer build(const std::vector<std::string>& training_texts, const WordTokenizerOptions& options);
  WordTokenizer(std::vector<std::string> vocab, bool lowercase) : PairTokenizer(std::move(vocab), lowercase) {}
  std::string kind() const override { return "word"; }

 protected:
  void encode_word(const std::string& word, std::vector<std::int64_t>& out) const override;
};

/// BERT's WordPiece: greedy longest-match-first over the vocabulary, continuations prefixed with "##"; a word
/// longer than kMaxWordChars code points, or one that cannot be split completely, becomes a single [UNK].
class WordPieceTokenizer final : public PairTokenizer {
 public:
  static constexpr std::int64_t kMaxWordChars = 100;
  /// One entry per line, id = line number - 1 (so ids match the pretrained embedding of that file). DataError
  /// naming the file (and line) when it is unreadable, empty or not UTF-8.
  static WordPieceTokenizer from_vocab_file(const std::string& path, bool lowercase);
  WordPieceTokenizer(std::vector<std::string> vocab, bool lowercase) : PairTokenizer(std::move(vocab), lowercase) {}
  std::string kind() const override { return "wordpiece"; }

 protected:
  void encode_word(const std::string& word, std::vector<std::int64_t>& out) const override;
};

/// One encoded pair: `[CLS] a [SEP] b [SEP]`, unpadded.
struct EncodedPair {
  std::vector<std::int64_t> ids;
  std::int64_t first_length = 0;  ///< tokens of `[CLS] a [SEP]` (segment 0); the rest is segment 1
  bool truncated = false;
};

/// Lays out `[CLS] a [SEP] b [SEP]` in at most `max_length` (>= 3) tokens: while too long, drops the last token
/// of the longer side (of b on a tie), as BERT's "longest_first" truncation does.
EncodedPair encode_pair(const PairTokenizer& tokenizer, std::vector<std::int64_t> a, std::vector<std::int64_t> b,
                        std::int64_t max_length);

}  // namespace routelab
