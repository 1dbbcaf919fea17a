// Internal to core/report, not part of the figure API: the helpers the seeds' figure files share (reading runs,
// evaluations and probes; colours and labels) and each seed's catalogue entries, which paper_figures() merges.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/report/builders/builder_detail.h"
#include "core/report/builders/catalog.h"
#include "core/run/probe_record.h"
#include "core/store/run_store.h"

namespace routelab::figure_detail {


/// "L" + i without GCC 12's -Wstringop-overflow false positive on operator+(const char*, string&&).
std::string prefixed(const char* prefix, std::int64_t i);
/// Token texts as column labels: whitespace made visible so that a space is not an empty label.
std::vector<std::string> token_labels(const std::vector<std::string>& tokens);
std::vector<std::string> token_labels(const json& tokens);  ///< an array of token texts

/// What the model of a stored run was built with: the tokenizer's vocabulary and the dataset's context (a
/// synthetic task derives its own), as the trainer does. A corpus run that stored its tokenizer (schema v4) is read
/// from the store, without the corpus or the tokenizer's file; others rebuild the dataset from `config`.
struct DataShape {
  std::int64_t vocab = 0, context = 0;
};

DataShape data_shape_of(const RunStore& store, const RunRecord& run, const json& config);

/// A figure named after the request, with `title` and the request's run ids in its meta.
Figure start(const FigureRequest& request, const std::string& title);

// Each seed's named figures, one file each (dtrnet_figures.cpp .. radial_figures.cpp).
std::vector<FigureInfo> dtrnet_figures();  ///< DTRNet
std::vector<FigureInfo> drr_figures();  ///< DRR
std::vector<FigureInfo> tagat_figures();  ///< TAGAT
std::vector<FigureInfo> tsa_figures();  ///< TSA
std::vector<FigureInfo> radial_figures();  ///< Radial Networks

}  // namespace routelab::figure_detail
