// Corpus paths to files, and the streaming reader over text and JSON-lines files.
#include "core/data/corpus_files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/data/tokenizer.h"
#include "core/util/errors.h"

namespace fs = std::filesystem;

namespace routelab {

std::vector<std::string> corpus_files(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw DataError(path + ": no such file or folder");
  std::vector<std::string> files;
  if (fs::is_directory(status)) {
    for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (!name.empty() && name.front() == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    if (ec) throw DataError(path + ": cannot list the folder (" + ec.message() + ")");
    std::sort(files.begin(), files.end());
    if (files.empty()) throw DataError(path + ": the folder holds no file");
    return files;
  }
  if (!fs::is_regular_file(status)) throw DataError(path + ": not a regular file or folder");
  files.push_back(path);
  return files;
}

bool is_json_lines(const std::string& path) {
  const auto ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

CorpusReader::CorpusReader(const std::vector<std::string>& paths, std::string field) : field_(std::move(field)) {
  for (const auto& p : paths) {
    auto found = corpus_files(p);
    files_.insert(files_.end(), found.begin(), found.end());
  }
  if (files_.empty()) throw DataError("no corpus given");
  for (const auto& f : files_) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec) throw DataError(f + ": cannot read its size (" + ec.message() + ")");
    sizes_.push_back(static_cast<std::int64_t>(size));
    total_bytes_ += static_cast<std::int64_t>(size);
  }
}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::open_next_file() {
  if (in_) {
    done_bytes_ += current_bytes_;
    current_bytes_ = 0;
    in_.reset();
  }
  if (next_file_ >= files_.size()) return false;
  current_ = files_[next_file_++];
  in_ = std::make_unique<std::ifstream>(current_, std::ios::binary);
  if (!*in_) throw DataError(current_ + ": cannot open (" + std::strerror(errno) + ")");
  current_jsonl_ = is_json_lines(current_);
  line_ = 0;
  return true;
}

CorpusReader::Position CorpusReader::position() const {
  if (!in_) return {next_file_, 0, 0, documents_};  // at the start of the next file
  return {next_file_ - 1, current_bytes_, line_, documents_};
}

void CorpusReader::seek(const Position& where) {
  if (where.file > files_.size()) throw DataError("corpus: no file " + std::to_string(where.file) + " to continue at");
  in_.reset();
  next_file_ = where.file;
  done_bytes_ = 0;
  for (std::size_t i = 0; i < where.file; ++i) done_bytes_ += sizes_[i];
  current_bytes_ = 0;
  documents_ = where.documents;
  if (where.file == files_.size() || where.offset == 0) return;
  open_next_file();
  if (where.offset > sizes_[where.file]) throw DataError(current_ + ": has fewer bytes than were read from it before");
  in_->seekg(where.offset);
  if (!*in_) throw DataError(current_ + ": cannot continue at byte " + std::to_string(where.offset));
  current_bytes_ = where.offset;
  line_ = where.line;
}

bool CorpusReader::next(Piece& piece) {
  while (true) {
    if (!in_ && !open_next_file()) return false;
    std::string line;
    if (!std::getline(*in_, line)) {
      if (in_->bad()) throw DataError(current_ + ": cannot read (" + std::strerror(errno) + ")");
      if (!open_next_file()) return false;
      continue;
    }
    ++line_;
    const bool newline = !in_->eof();
    current_bytes_ += static_cast<std::int64_t>(line.size()) + (newline ? 1 : 0);
    const auto where = [&] { return current_ + ":" + std::to_string(line_); };
    if (current_jsonl_) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw DataError(where() + ": not a JSON object (" + e.what() + ")");
      }
      const auto it = doc.is_object() ? doc.find(field_) : doc.end();
      if (it == doc.end() || !it->is_string())
        throw DataError(where() + ": no string field \"" + field_ + "\" (the document's text)");
      piece.text = it->get<std::string>();
      piece.ends_document = true;
    } else {
      if (auto bad = find_invalid_utf8(line); bad != std::string::npos)
        throw DataError(where() + ": not valid UTF-8 (byte " + std::to_string(bad + 1) + " of the line)");
      piece.text = std::move(line);
      if (newline) piece.text += '\n';
      piece.ends_document = in_->peek() == std::char_traits<char>::eof();
    }
    if (piece.ends_document) ++documents_;
    return true;
  }
}

}  // namespace routelab
