// Base64 (RFC 4648, with padding) for binary payloads inside JSON documents, e.g. a SentencePiece model stored with
// the run that trained on it.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace routelab {

std::string base64_encode(std::string_view bytes);
/// The decoded bytes, or nullopt when `text` is not padded Base64 (white space is not accepted).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace routelab
