// libroutelab_spm.so: SentencePiece behind spm_api.h's function table. Built as a module and opened by
// spm_loader.cpp only; it links SentencePiece, nothing of RouteLab or Torch.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "core/data/spm_api.h"

namespace {

using sentencepiece::SentencePieceProcessor;

const SentencePieceProcessor& as_processor(const void* p) { return *static_cast<const SentencePieceProcessor*>(p); }

void* load(const std::string& model, std::string* error) {
  auto processor = std::make_unique<SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(model);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return processor.release();
}

void destroy(void* processor) { delete static_cast<SentencePieceProcessor*>(processor); }
int size(const void* p) { return as_processor(p).GetPieceSize(); }

bool encode(const void* p, std::string_view text, std::vector<int>* ids, std::string* error) {
  const auto status = as_processor(p).Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

bool decode(const void* p, const std::vector<int>& ids, std::string* text, std::string* error) {
  const auto status = as_processor(p).Decode(ids, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

const std::string& piece(const void* p, int id) { return as_processor(p).IdToPiece(id); }

int piece_kind(const void* p, int id) {
  const auto& sp = as_processor(p);
  return (sp.IsByte(id) ? 1 : 0) | (sp.IsControl(id) ? 2 : 0) | (sp.IsUnknown(id) ? 4 : 0);
}

int bos_id(const void* p) { return as_processor(p).bos_id(); }
int eos_id(const void* p) { return as_processor(p).eos_id(); }

/// SentencePiece's sentence iterator over the caller's line callback.
class Lines final : public sentencepiece::SentenceIterator {
 public:
  Lines(bool (*next)(void*, std::string*), void* context) : next_(next), context_(context) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(context_, &line_); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  bool (*next_)(void*, std::string*);
  void* context_;
  std::string line_;
  bool done_ = false;
};

bool train(const std::unordered_map<std::string, std::string>& spec, bool (*next_line)(void*, std::string*),
           void* context, std::string* model, std::string* error) {
  Lines lines(next_line, context);
  const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &lines, model);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

const routelab::SpmApi kApi = {routelab::kSpmApiVersion, load, destroy, size, encode, decode, piece, piece_kind,
                               bos_id, eos_id, train};

}  // namespace

extern "C" __attribute__((visibility("default"))) const routelab::SpmApi* routelab_spm_api() { return &kApi; }
