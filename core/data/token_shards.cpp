// Memory-mapped shard files, the three folder layouts, and the llm.c shard writer.
#include "core/data/token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/util/errors.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

std::int32_t read_le32(const unsigned char* p) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                                   static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24);
}

void write_le32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

// ---- MappedShard ----------------------------------------------------------------------------------------------

MappedShard::MappedShard(const std::string& path, Layout layout) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError(path + ": cannot open the shard (" + errno_text() + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(path + ": not a regular file");
  }
  const auto bytes = static_cast<std::int64_t>(st.st_size);
  if (bytes > 0) {
    map_ = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      ::close(fd);
      throw DataError(path + ": cannot map the shard (" + errno_text() + ")");
    }
    map_bytes_ = static_cast<std::size_t>(bytes);
    ::madvise(map_, map_bytes_, MADV_RANDOM);  // windows are drawn at random: no read-ahead of whole shards
  }
  ::close(fd);  // the mapping keeps the file
  const auto* base = static_cast<const unsigned char*>(map_);
  if (layout == Layout::Raw16) {
    if (bytes % 2 != 0) throw DataError(path + ": " + std::to_string(bytes) + " bytes, not whole uint16 tokens");
    tokens_begin_ = base;
    tokens_ = bytes / 2;
    width_ = 2;
    return;
  }
  if (bytes < kLlmcHeaderBytes)
    throw DataError(path + ": " + std::to_string(bytes) + " bytes, shorter than llm.c's 1024-byte header");
  const std::int32_t magic = read_le32(base), version = read_le32(base + 4), count = read_le32(base + 8);
  if (magic == kLlmcMagic16) {
    width_ = 2;
  } else if (magic == kLlmcMagic32) {
    width_ = 4;
  } else {
    throw DataError(path + ": magic number " + std::to_string(magic) + " is not llm.c's (" +
                    std::to_string(kLlmcMagic16) + " for uint16 tokens, " + std::to_string(kLlmcMagic32) +
                    " for uint32)");
  }
  if (count < 0) throw DataError(path + ": the header states " + std::to_string(count) + " tokens");
  const std::int64_t expected = kLlmcHeaderBytes + static_cast<std::int64_t>(count) * width_;
  if (bytes != expected)
    throw DataError(path + ": the header (version " + std::to_string(version) + ") states " + std::to_string(count) +
                    " tokens of " + std::to_string(width_) + " bytes, so " + std::to_string(expected) +
                    " bytes, but the file has " + std::to_string(bytes) + " (truncated or still being written?)");
  tokens_begin_ = base + kLlmcHeaderBytes;
  tokens_ = count;
}

MappedShard::~MappedShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

MappedShard::MappedShard(MappedShard&& other) noexcept
    : path_(std::move(other.path_)), map_(other.map_), map_bytes_(other.map_bytes_),
      tokens_begin_(other.tokens_begin_), tokens_(other.tokens_), width_(other.width_) {
  other.map_ = nullptr;
  other.map_bytes_ = 0;
}

void MappedShard::copy(std::int64_t first, std::int64_t count, std::int64_t* out) const {
  if (first < 0 || count < 0 || first + count > tokens_)
    throw DataError(path_ + ": tokens " + std::to_string(first) + ".." + std::to_string(first + count) +
                    " are outside the shard's " + std::to_string(tokens_));
  const unsigned char* p = tokens_begin_ + first * width_;
  if (width_ == 2) {
    for (std::int64_t i = 0; i < count; ++i, p += 2) out[i] = p[0] | p[1] << 8;
  } else {
    for (std::int64_t i = 0; i < count; ++i, p += 4) out[i] = static_cast<std::uint32_t>(read_le32(p));
  }
}

std::int64_t MappedShard::max_token() const {
  std::int64_t best = -1;
  std::vector<std::int64_t> buffer(1 << 16);
  for (std::int64_t first = 0; first < tokens_; first += static_cast<std::int64_t>(buffer.size())) {
    const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(buffer.size()), tokens_ - first);
    copy(first, n, buffer.data());
    best = std::max(best, *std::max_element(buffer.begin(), buffer.begin() + n));
  }
  return best;
}

// ---- ShardStream ----------------------------------------------------------------------------------------------

void ShardStream::add(MappedShard shard) {
  starts_.push_back(total_);
  total_ += shard.tokens();
  shards_.push_back(std::move(shard));
}

void ShardStream::copy(std::int64_t first, std::int64_t count, std::int64_t* out) const {
  if (first < 0 || count < 0 || first + count > total_)
    throw DataError("tokens " + std::to_string(first) + ".." + std::to_string(first + count) +
                    " are outside the split's " + std::to_string(total_));
  // The shard holding `first`: the last one starting at or before it.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), first);
  auto index = static_cast<std::size_t>(std::distance(starts_.begin(), it)) - 1;
  while (count > 0) {
    const auto& shard = shards_[index];
    const std::int64_t offset = first - starts_[index];
    const std::int64_t n = std::min(count, shard.tokens() - offset);
    shard.copy(offset, n, out);
    out += n;
    first += n;
    count -= n;
    ++index;
  }
}

// ---- Folder layouts -------------------------------------------------------------------------------------------

ShardFolder find_shards(const std::string& path) {
  std::error_code ec;
  fs::path folder(path);
  ShardFolder found;
  if (fs::is_regular_file(folder, ec) && folder.filename() == kShardManifest) folder = folder.parent_path();
  if (!fs::is_directory(folder, ec)) throw DataError(path + ": not a folder of token shards");
  const auto manifest_path = folder / kShardManifest;
  if (fs::is_regular_file(manifest_path, ec)) {
    found.layout = "routelab";
    std::ifstream in(manifest_path);
    try {
      found.manifest = nlohmann::json::parse(in);
      for (const auto& shard : found.manifest.at("shards")) {
        const auto file = (folder / shard.at("file").get<std::string>()).string();
        const auto split = shard.at("split").get<std::string>();
        if (split == "train") found.train.push_back(file);
        else if (split == "val") found.val.push_back(file);
        else throw DataError(manifest_path.string() + ": shard split '" + split + "' (expected train or val)");
      }
    } catch (const nlohmann::json::exception& e) {
      throw DataError(manifest_path.string() + ": not a RouteLab shard manifest (" + e.what() + ")");
    }
  } else if (fs::is_regular_file(folder / "train.bin", ec) && fs::is_regular_file(folder / "val.bin", ec)) {
    found.layout = "nanogpt";
    found.file_layout = MappedShard::Layout::Raw16;
    found.train = {(folder / "train.bin").string()};
    found.val = {(folder / "val.bin").string()};
  } else {
    found.layout = "llm.c";
    std::vector<std::string> bins;
    for (const auto& entry : fs::directory_iterator(folder, ec))
      if (entry.is_regular_file(ec) && entry.path().extension() == ".bin") bins.push_back(entry.path().string());
    std::sort(bins.begin(), bins.end());
    for (const auto& file : bins)
      (fs::path(file).filename().string().find("val") != std::string::npos ? found.val : found.train).push_back(file);
    if (bins.empty())
      throw DataError(path + ": no token shards (RouteLab's " + std::string(kShardManifest) +
                      ", llm.c's *.bin shards, or nanoGPT's train.bin and val.bin)");
  }
  if (found.train.empty()) throw DataError(path + ": " + found.layout + " shards without a training shard");
  if (found.val.empty())
    throw DataError(path + ": " + found.layout + " shards without a validation shard (a file named *val*)");
  return found;
}

// ---- ShardWriter ----------------------------------------------------------------------------------------------

struct ShardWriter::Open {
  std::string split, file, temp;
  std::FILE* out = nullptr;
  std::int64_t tokens = 0;
};

ShardWriter::ShardWriter(std::string folder, std::string prefix, int token_bytes, std::int64_t shard_tokens)
    : folder_(std::move(folder)), prefix_(std::move(prefix)), width_(token_bytes), shard_tokens_(shard_tokens) {
  if (width_ != 2 && width_ != 4) throw DataError("shards hold 2- or 4-byte tokens, not " + std::to_string(width_));
  if (shard_tokens_ < 1 || shard_tokens_ >= (std::int64_t{1} << 31))
    throw ConfigError("--shard-tokens " + std::to_string(shard_tokens_) + " must be in 1..2^31-1 (llm.c's limit)");
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) throw DataError(folder_ + ": cannot create the folder (" + ec.message() + ")");
}

ShardWriter::ShardWriter(std::string folder, std::string prefix, int token_bytes, std::int64_t shard_tokens,
                         const nlohmann::json& state)
    : ShardWriter(std::move(folder), std::move(prefix), token_bytes, shard_tokens) {
  // The files are another writer's: kept whatever happens here (a delegating constructor that throws is destroyed).
  keep_ = true;
  const auto temp_of = [this](const std::string& file) { return (fs::path(folder_) / (file + ".tmp")).string(); };
  const auto size_of = [](const std::string& path) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw DataError(path + ": missing (" + ec.message() + "); the shards cannot be continued");
    return static_cast<std::int64_t>(size);
  };
  std::vector<std::string> kept;
  next_index_ = state.at("next_index").get<int>();
  for (const auto& shard : state.at("written")) {
    const auto file = shard.at("file").get<std::string>();
    const auto tokens = shard.at("tokens").get<std::int64_t>();
    if (size_of(temp_of(file)) != file_bytes(tokens))
      throw DataError(temp_of(file) + ": not the " + std::to_string(tokens) + " tokens it held; the shards cannot be "
                      "continued");
    closed_temps_.push_back(temp_of(file));
    written_.push_back(shard);
    kept.push_back(file + ".tmp");
  }
  for (const auto& shard : state.at("open")) {
    const auto file = shard.at("file").get<std::string>();
    const auto tokens = shard.at("tokens").get<std::int64_t>();
    const auto temp = temp_of(file);
    if (size_of(temp) < file_bytes(tokens))
      throw DataError(temp + ": shorter than the " + std::to_string(tokens) + " tokens it held; the shards cannot be "
                      "continued");
    std::error_code ec;
    fs::resize_file(temp, static_cast<std::uintmax_t>(file_bytes(tokens)), ec);  // what came after the state goes
    if (ec) throw DataError(temp + ": cannot cut back (" + ec.message() + ")");
    Open& open = open_shard(shard.at("split").get<std::string>(), file, "r+b");
    if (std::fseek(open.out, 0, SEEK_END) != 0) throw DataError(temp + ": cannot write (" + errno_text() + ")");
    open.tokens = tokens;
    kept.push_back(file + ".tmp");
  }
  std::error_code ec;  // shards begun after the state: begun again
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(prefix_ + "_", 0) == 0 && name.size() > 8 && name.substr(name.size() - 8) == ".bin.tmp" &&
        std::find(kept.begin(), kept.end(), name) == kept.end())
      fs::remove(entry.path(), ec);
  }
}

ShardWriter::~ShardWriter() {
  for (auto& open : open_) {  // abandoned: no shard of the unfinished set stays, unless kept to be continued
    if (open->out) std::fclose(open->out);
    if (!keep_) std::remove(open->temp.c_str());
  }
  if (!keep_)
    for (const auto& temp : closed_temps_) std::remove(temp.c_str());
}

ShardWriter::Open& ShardWriter::open_shard(const std::string& split, const std::string& file, const char* mode) {
  auto fresh = std::make_unique<Open>();
  fresh->split = split;
  fresh->file = file;
  fresh->temp = (fs::path(folder_) / (file + ".tmp")).string();
  fresh->out = std::fopen(fresh->temp.c_str(), mode);
  if (!fresh->out) throw DataError(fresh->temp + ": cannot write (" + errno_text() + ")");
  open_.push_back(std::move(fresh));
  return *open_.back();
}

nlohmann::json ShardWriter::state(bool sync) {
  nlohmann::json open = nlohmann::json::array();
  for (const auto& o : open_) {
    const bool ok = std::fflush(o->out) == 0 && (!sync || ::fsync(::fileno(o->out)) == 0);
    if (!ok) throw DataError(o->temp + ": cannot write (" + errno_text() + ")");
    open.push_back({{"file", o->file}, {"split", o->split}, {"tokens", o->tokens}});
  }
  return {{"next_index", next_index_}, {"written", written_}, {"open", open}};
}

void ShardWriter::append(const std::string& split, const std::vector<std::int32_t>& tokens) {
  auto it = std::find_if(open_.begin(), open_.end(), [&](const auto& o) { return o->split == split; });
  Open* open = it == open_.end() ? nullptr : it->get();
  std::vector<unsigned char> bytes;
  std::size_t done = 0;
  while (done < tokens.size()) {
    if (!open) {
      char index[16];
      std::snprintf(index, sizeof index, "%06d", next_index_++);
      open = &open_shard(split, prefix_ + "_" + split + "_" + index + ".bin", "wb");
      std::vector<unsigned char> header(kLlmcHeaderBytes, 0);  // the count is written on close
      if (std::fwrite(header.data(), 1, header.size(), open->out) != header.size())
        throw DataError(open->temp + ": cannot write (" + errno_text() + ")");
    }
    const auto n = static_cast<std::size_t>(
        std::min<std::int64_t>(shard_tokens_ - open->tokens, static_cast<std::int64_t>(tokens.size() - done)));
    bytes.resize(n * static_cast<std::size_t>(width_));
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::uint32_t>(tokens[done + i]);
      bytes[i * width_] = static_cast<unsigned char>(v);
      bytes[i * width_ + 1] = static_cast<unsigned char>(v >> 8);
      if (width_ == 4) {
        bytes[i * width_ + 2] = static_cast<unsigned char>(v >> 16);
        bytes[i * width_ + 3] = static_cast<unsigned char>(v >> 24);
      }
    }
    if (std::fwrite(bytes.data(), 1, bytes.size(), open->out) != bytes.size())
      throw DataError(open->temp + ": cannot write (" + errno_text() + ")");
    open->tokens += static_cast<std::int64_t>(n);
    done += n;
    if (open->tokens == shard_tokens_) {
      close(*open);
      open_.erase(std::find_if(open_.begin(), open_.end(), [&](const auto& o) { return o.get() == open; }));
      open = nullptr;
    }
  }
}

void ShardWriter::close(Open& open) {
  unsigned char header[12];
  write_le32(header, static_cast<std::uint32_t>(width_ == 2 ? kLlmcMagic16 : kLlmcMagic32));
  write_le32(header + 4, width_ == 2 ? 1 : 7);
  write_le32(header + 8, static_cast<std::uint32_t>(open.tokens));
  const bool ok = std::fseek(open.out, 0, SEEK_SET) == 0 && std::fwrite(header, 1, sizeof header, open.out) == 12 &&
                  std::fflush(open.out) == 0 && ::fsync(::fileno(open.out)) == 0;
  std::fclose(open.out);
  open.out = nullptr;
  if (!ok) throw DataError(open.temp + ": cannot write (" + errno_text() + ")");
  closed_temps_.push_back(open.temp);
  written_.push_back({{"file", open.file}, {"split", open.split}, {"tokens", open.tokens}});
}

nlohmann::json ShardWriter::finish() {
  for (auto& open : open_)
    if (open->tokens > 0) close(*open);
  for (auto& open : open_)
    if (open->out) {
      std::fclose(open->out);
      std::remove(open->temp.c_str());
    }
  open_.clear();
  // Every shard takes its name only now, so a stopped writer leaves no shard that could pass for a finished set.
  for (const auto& shard : written_) {
    const auto final_path = (fs::path(folder_) / shard.at("file").get<std::string>()).string();
    std::error_code ec;
    fs::rename(final_path + ".tmp", final_path, ec);
    if (ec) throw DataError(final_path + ": cannot write (" + ec.message() + ")");
  }
  closed_temps_.clear();
  // In index order: names end in "_<6-digit index>.bin".
  const auto index_of = [](const nlohmann::json& shard) {
    const auto file = shard.at("file").get<std::string>();
    return file.substr(file.size() - 10);
  };
  std::sort(written_.begin(), written_.end(), [&](const auto& a, const auto& b) { return index_of(a) < index_of(b); });
  return written_;
}

}  // namespace routelab
