// A corpus on disk, streamed: a text file, a folder of them, or JSON lines (one document per line, its text in a
// field). Used to train tokenizers and to prepare token shards, so neither holds the corpus in memory.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace routelab {

/// The files of a corpus path: a file is itself; a folder is every regular file below it whose name does not
/// start with '.', sorted by path. DataError naming the path when it does not exist or holds no file.
std::vector<std::string> corpus_files(const std::string& path);

/// True for JSON lines by extension (.jsonl, .ndjson).
bool is_json_lines(const std::string& path);

/// Reads the files of one or more corpus paths in order. A text file gives its lines (each with its '\n', the last
/// without one when the file does not end in one), the last of them ending the file's document; a JSON-lines file
/// gives one document per non-empty line, the string field `field` of its object. Invalid UTF-8, a line that is not
/// a JSON object or lacks the field: DataError naming the file and line.
class CorpusReader {
 public:
  explicit CorpusReader(const std::vector<std::string>& paths, std::string field = "text");
  ~CorpusReader();

  struct Piece {
    std::string text;
    bool ends_document = false;
  };
  /// The next piece, false at the end of the corpus.
  bool next(Piece& piece);

  /// Where the next piece comes from, to continue there in another process (a stopped `prepare`).
  struct Position {
    std::size_t file = 0;       ///< index into files()
    std::int64_t offset = 0;    ///< bytes of that file already read
    std::int64_t line = 0;      ///< lines of that file already read
    std::int64_t documents = 0;
  };
  Position position() const;
  /// Continues from `where` (a position of a reader of the same files): DataError naming the file where it no longer
  /// has that many bytes.
  void seek(const Position& where);

  const std::vector<std::string>& files() const { return files_; }
  /// The size of each file when the reader was made.
  const std::vector<std::int64_t>& sizes() const { return sizes_; }
  std::int64_t total_bytes() const { return total_bytes_; }
  std::int64_t bytes_read() const { return done_bytes_ + current_bytes_; }
  std::int64_t documents() const { return documents_; }

 private:
  bool open_next_file();

  std::vector<std::string> files_;
  std::vector<std::int64_t> sizes_;
  std::string field_;
  std::size_t next_file_ = 0;
  std::unique_ptr<std::ifstream> in_;
  std::string current_;     ///< the open file
  bool current_jsonl_ = false;
  std::int64_t line_ = 0;   ///< 1-based line number in the open file
  std::int64_t total_bytes_ = 0, done_bytes_ = 0, current_bytes_ = 0, documents_ = 0;
};

}  // namespace routelab
