// The paper's baseline classifier (§6.1.3, notebook cell 4), with the encoder layers of
// torch.nn.TransformerEncoderLayer (post-LN, ReLU). The notebook pools over padding too; we pool over real tokens
// only, so padding never changes a prediction.
#include "core/models/vanilla_classifier.h"

#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/util/errors.h"

namespace routelab {

const OptionTable<VanillaClassifierOptions>& vanilla_classifier_options_table() {
  using T = OptionType;
  static const auto table = [] {
    OptionTable<VanillaClassifierOptions> t([] { return VanillaClassifierOptions(0, 0, 0); });
    t.value(ROUTELAB_OPTION(n_layer), T::Int, "Transformer encoder layers (TAGAT §6.1.3: 2)", 1, 64)
        .value(ROUTELAB_OPTION(n_embd), T::Int, "model width d", 8, 8192)
        .value(ROUTELAB_OPTION(n_head), T::Int, "attention heads (must divide n_embd)", 1, 256)
        .weight_layout()
        .value(ROUTELAB_OPTION(d_ff), T::Int, "feed-forward width (notebook: 512)", 1, 1 << 20)
        .value(ROUTELAB_OPTION(dropout), T::Float, "dropout inside the encoder layers (torch default)", 0, 0.9)
        .training_only()
        .value(ROUTELAB_OPTION(pool_dropout), T::Float, "dropout on the mean-pooled representation (notebook: 0.4)", 0,
               0.9)
        .training_only();
    return t;
  }();
  return table;
}

VanillaClassifierOptions vanilla_classifier_options_from_json(const nlohmann::json& m, std::int64_t vocab_size,
                                                              std::int64_t num_classes, std::int64_t context) {
  return vanilla_classifier_options_table().read(m, VanillaClassifierOptions(vocab_size, num_classes, context));
}

torch::Tensor masked_mean(const torch::Tensor& h, const torch::Tensor& mask) {
  const auto m = mask.to(h.scalar_type()).unsqueeze(-1);        // (B, T, 1)
  return (h * m).sum(1) / m.sum(1).clamp_min(1.0);              // (B, C)
}

VanillaClassifier::VanillaClassifier(VanillaClassifierOptions options) : options_(std::move(options)) {
  const auto C = options_.n_embd();
  if (options_.num_classes() < 2)
    throw ConfigError("model: a classifier needs at least 2 classes, the data has " +
                      std::to_string(options_.num_classes()));
  tok_emb = register_module("tok_emb", torch::nn::Embedding(options_.vocab_size(), C));
  pos_table = register_buffer("pos_table", sinusoidal_positions(options_.context(), C));
  auto layer_list = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t l = 0; l < options_.n_layer(); ++l) {
    layers.push_back(EncoderBlock(EncoderBlockOptions(C, options_.n_head())
                                      .d_ff(options_.d_ff())
                                      .dropout(options_.dropout())
                                      .attn_dropout(options_.dropout())
                                      .attn_output_dropout(true)));
    layer_list->push_back(layers.back());
  }
  head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(C, options_.num_classes())));
}

ClassifierOutput VanillaClassifier::forward(const torch::Tensor& input, const torch::Tensor& mask,
                                            const torch::Tensor& /*segment*/, bool trace) {
  const auto T = input.size(1);
  if (T > options_.context())
    throw ConfigError("vanilla-classifier: sequence length " + std::to_string(T) + " exceeds the model's context " +
                      std::to_string(options_.context()));
  auto h = ROUTELAB_IN_PART("embedding", tok_emb(input) + pos_table.narrow(0, 0, T));  // (B, T, C)
  for (auto& layer : layers) h = layer->forward(h, mask);
  ClassifierOutput out;
  {
    ROUTELAB_PART("head");
    auto pooled = masked_mean(h, mask);  // (B, C)
    if (is_training() && options_.pool_dropout() > 0) pooled = torch::dropout(pooled, options_.pool_dropout(), true);
    out.logits = linear(pooled, head).to(torch::kFloat);  // (B, num_classes)
  }
  out.aux_loss = torch::zeros({}, out.logits.options());
  if (trace) {
    for (std::int64_t l = 0; l < options_.n_layer(); ++l) {
      LayerTrace t;
      t.layer = static_cast<int>(l);
      const auto tokens = mask.sum().item<std::int64_t>();
      t.tokens_processed = {{"attn", tokens}, {"mlp", tokens}};
      out.trace.push_back(std::move(t));
    }
  }
  return out;
}

namespace {

void check_vanilla_options(const nlohmann::json& m, const std::string& path) {
  const auto n_embd = m.at("n_embd").get<std::int64_t>(), n_head = m.at("n_head").get<std::int64_t>();
  if (n_embd % n_head != 0)
    throw ConfigError(path + ".n_head: " + std::to_string(n_head) + " does not divide n_embd " + std::to_string(n_embd));
}

}  // namespace

ArchitectureEntry vanilla_classifier_architecture() {
  ArchitectureEntry e;
  e.id = "vanilla-classifier";
  e.display_name = "Vanilla Transformer classifier";
  e.source = "TAGAT §6.1.3 baseline";
  e.description =
      "Embeddings + sinusoidal positions, post-LN Transformer encoder layers (torch style), mean pooling over real "
      "tokens, dropout, linear head.";
  e.options = vanilla_classifier_options_table().schema();
  e.read_back_options = [](const nlohmann::json& m) { return read_back(m, vanilla_classifier_options_table()); };
  e.check = check_vanilla_options;
  e.task = Task::Classification;
  e.create_classifier = [](const nlohmann::json& m, const ModelContext& ctx) -> std::shared_ptr<SequenceClassifier> {
    return std::make_shared<VanillaClassifier>(
        vanilla_classifier_options_from_json(m, ctx.vocab_size, ctx.num_classes, ctx.context));
  };
  e.color = 7;
  return e;
}

}  // namespace routelab
