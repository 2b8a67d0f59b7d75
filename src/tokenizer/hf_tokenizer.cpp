// tokenizer.json loading, encoding and decoding; see hf_tokenizer.hpp. The
// pipeline is Hugging Face's: split on added tokens, normalise each piece
// between them, pre-tokenise into words, BPE each word, map to ids; decoding
// runs the declared decoders over the tokens' strings. The normalizers,
// pre-tokenizers and decoders are in hf_pipeline.
#include "tokenizer/hf_tokenizer.hpp"

#include "tokenizer/hf_pipeline.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/small_file.hpp"
#include "base/utf8.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace sao::tokenizer {

namespace {

using Json = nlohmann::json;

// Ids index a table of that many entries, so a hostile file must not name
// id 2^31. Real vocabularies stay far below (Gemma 3: 262,144).
constexpr uint64_t kMaxTokenIds = 1u << 20;

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
};

}  // namespace

// ---- the tokenizer ---------------------------------------------------------

struct HfTokenizer::Impl {
  std::string where;
  std::unordered_map<std::string, int64_t> vocab;  // model vocabulary and added tokens
  std::vector<std::string> id_to_token;
  std::vector<bool> added_id;    // id is an added token
  std::vector<bool> special_id;  // id is a special added token
  std::vector<AddedToken> added;
  // Added tokens by first byte, longest first, for leftmost-longest matching.
  std::array<std::vector<std::size_t>, 256> added_by_first_byte;

  std::optional<hf::Normalizer> normalizer;
  std::optional<hf::PreTokenizer> pre_tokenizer;
  std::optional<hf::Decoder> decoder;

  // BPE: merge of (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int64_t>> merges;
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  int64_t unk_id = -1;
  std::array<int64_t, 256> byte_token_ids{};  // "<0xXX>" ids, -1 where absent

  bool clean_up_spaces = false;
  int64_t bos = -1, eos = -1, pad = -1;
  std::vector<int64_t> stop;  // generation_config.json's eos_token_id, when read

  static uint64_t pair_key(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
  }

  // BPE of one pre-tokenised word, ids appended to `out`.
  void bpe(std::string_view word, std::vector<int64_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges) {
      const auto whole = vocab.find(std::string(word));
      if (whole != vocab.end()) {
        out.push_back(whole->second);
        return;
      }
    }
    struct Symbol {
      int64_t id;
      int prev;
      int next;
    };
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    for (std::size_t i = 0; i < word.size();) {
      const std::size_t length = hf::char_length(word, i);
      const auto found = vocab.find(std::string(word.substr(i, length)));
      if (found != vocab.end()) {
        symbols.push_back({found->second, 0, 0});
      } else if (byte_fallback && std::all_of(word.begin() + static_cast<std::ptrdiff_t>(i),
                                              word.begin() + static_cast<std::ptrdiff_t>(i + length), [&](char c) {
                                                return byte_token_ids[static_cast<unsigned char>(c)] >= 0;
                                              })) {
        for (std::size_t k = i; k < i + length; ++k)
          symbols.push_back({byte_token_ids[static_cast<unsigned char>(word[k])], 0, 0});
      } else if (unk_id >= 0) {
        if (!(fuse_unk && !symbols.empty() && symbols.back().id == unk_id)) symbols.push_back({unk_id, 0, 0});
      } else {
        char code[16];
        std::snprintf(code, sizeof(code), "U+%04X", hf::code_point_at(word, i));
        throw Error(where + ": the text has a character with no token and the model has no unk_token (" +
                    std::string(code) + ")");
      }
      i += length;
    }
    const int count = static_cast<int>(symbols.size());
    for (int i = 0; i < count; ++i) {
      symbols[static_cast<std::size_t>(i)].prev = i - 1;
      symbols[static_cast<std::size_t>(i)].next = i + 1 < count ? i + 1 : -1;
    }
    // Lowest rank first; among equal ranks the leftmost (Hugging Face's order).
    struct Candidate {
      int32_t rank;
      int left;
      int64_t left_id;
      int64_t right_id;
      bool operator>(const Candidate& other) const {
        return rank != other.rank ? rank > other.rank : left > other.left;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto consider = [&](int left) {
      if (left < 0) return;
      const int right = symbols[static_cast<std::size_t>(left)].next;
      if (right < 0) return;
      const int64_t a = symbols[static_cast<std::size_t>(left)].id;
      const int64_t b = symbols[static_cast<std::size_t>(right)].id;
      const auto found = merges.find(pair_key(a, b));
      if (found != merges.end()) queue.push({found->second.first, left, a, b});
    };
    for (int i = 0; i + 1 < count; ++i) consider(i);
    std::vector<bool> gone(static_cast<std::size_t>(count), false);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      auto& left = symbols[static_cast<std::size_t>(top.left)];
      if (gone[static_cast<std::size_t>(top.left)] || left.id != top.left_id || left.next < 0) continue;
      auto& right = symbols[static_cast<std::size_t>(left.next)];
      if (right.id != top.right_id) continue;  // stale: a neighbour merged since
      left.id = merges.at(pair_key(top.left_id, top.right_id)).second;
      gone[static_cast<std::size_t>(left.next)] = true;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.left;
      consider(left.prev);
      consider(top.left);
    }
    // Symbol 0 is never merged away (a merge removes the right symbol).
    for (int i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next)
      out.push_back(symbols[static_cast<std::size_t>(i)].id);
  }

  // Normalise, pre-tokenise and BPE text that holds no added token.
  void encode_plain(std::string text, bool starts_text, std::vector<int64_t>& out) const {
    if (text.empty()) return;
    const hf::OutputBound bound(text.size());
    if (normalizer) text = (*normalizer)(std::move(text), bound);
    std::vector<hf::Piece> pieces{{std::move(text), starts_text}};
    if (pre_tokenizer) pieces = (*pre_tokenizer)(std::move(pieces), bound);
    for (const auto& piece : pieces) bpe(piece.text, out);
  }

  std::vector<int64_t> encode(std::string_view raw, bool match_special) const {
    return encode_sanitised(base::replace_invalid_utf8(raw), match_special, {});
  }

  // `untrusted`: sorted, disjoint [begin, end) byte ranges of `text` where no
  // special token may match (nor one that overlaps them).
  std::vector<int64_t> encode_sanitised(const std::string& text, bool match_special,
                                        const std::vector<std::pair<std::size_t, std::size_t>>& untrusted) const {
    std::vector<int64_t> out;
    std::size_t range = 0;          // first untrusted range that does not end before i
    std::size_t segment_start = 0;  // start of the text not yet encoded
    std::size_t i = 0;
    while (i < text.size()) {
      const AddedToken* match = nullptr;
      for (const std::size_t index : added_by_first_byte[static_cast<unsigned char>(text[i])]) {
        const AddedToken& candidate = added[index];
        if (candidate.special && !match_special) continue;
        if (candidate.special && range < untrusted.size() && untrusted[range].first < i + candidate.content.size())
          continue;  // overlaps untrusted text
        if (text.compare(i, candidate.content.size(), candidate.content) == 0) {
          match = &candidate;
          break;
        }
      }
      const auto advance_ranges = [&] {
        while (range < untrusted.size() && untrusted[range].second <= i) ++range;
      };
      if (match == nullptr) {
        ++i;
        advance_ranges();
        continue;
      }
      std::size_t before_end = i;
      if (match->lstrip) {
        while (before_end > segment_start && hf::is_white_space(static_cast<unsigned char>(text[before_end - 1])))
          --before_end;
      }
      encode_plain(text.substr(segment_start, before_end - segment_start), segment_start == 0, out);
      out.push_back(match->id);
      i += match->content.size();
      if (match->rstrip) {
        while (i < text.size() && hf::is_white_space(static_cast<unsigned char>(text[i]))) ++i;
      }
      segment_start = i;
      advance_ranges();
    }
    encode_plain(text.substr(segment_start), segment_start == 0, out);
    return out;
  }
};

namespace {

// A token named by tokenizer_config.json: a string or {"content": ...}.
int64_t config_token_id(const Json& config, const char* key, const HfTokenizer::Impl& impl, const std::string& where) {
  if (!config.is_object() || !config.contains(key) || config.at(key).is_null()) return -1;
  const Json& value = config.at(key);
  std::string content;
  if (value.is_string()) {
    content = value.get<std::string>();
  } else if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    content = value.at("content").get<std::string>();
  } else {
    throw Error(where + "." + key + ": expected a token string or {\"content\": ...}");
  }
  const auto found = impl.vocab.find(content);
  if (found == impl.vocab.end())
    throw Error(where + "." + key + ": token \"" + content + "\" is not in the vocabulary");
  return found->second;
}

void load_bpe_model(const Json& model, HfTokenizer::Impl& impl, const std::string& where) {
  const std::string type = model.contains("type") ? hf::string_at(model, "type", where) : "BPE";
  if (type != "BPE") throw Error(where + ".type: model '" + type + "' is not supported (supported: BPE)");
  if (model.contains("dropout") && !model.at("dropout").is_null())
    throw Error(where + ".dropout: BPE dropout is for training tokenizers and is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() &&
        !(model.at(key).is_string() && model.at(key).get<std::string>().empty()))
      throw Error(where + "." + key + ": a non-empty value is not supported");
  }
  const Json& vocab = hf::require_key(model, "vocab", where);
  if (!vocab.is_object()) throw Error(where + ".vocab: expected an object of token -> id");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= kMaxTokenIds)
      throw Error(where + ".vocab[\"" + base::truncate_utf8(token, 40) + "\"]: expected an id in [0, " +
                  std::to_string(kMaxTokenIds) + ")");
    impl.vocab[token] = id.get<int64_t>();
  }
  impl.ignore_merges = hf::bool_or(model, "ignore_merges", false, where);
  impl.byte_fallback = hf::bool_or(model, "byte_fallback", false, where);
  impl.fuse_unk = hf::bool_or(model, "fuse_unk", false, where);
  if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const std::string unk = hf::string_at(model, "unk_token", where);
    const auto found = impl.vocab.find(unk);
    if (found == impl.vocab.end()) throw Error(where + ".unk_token: \"" + unk + "\" is not in the vocabulary");
    impl.unk_id = found->second;
  }
  const Json& merges = hf::require_key(model, "merges", where);
  if (!merges.is_array()) throw Error(where + ".merges: expected an array");
  impl.merges.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& merge = merges[rank];
    const std::string at = where + ".merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw Error(at + ": expected \"left right\" (two tokens, one space)");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw Error(at + ": expected \"left right\" or [\"left\", \"right\"]");
    }
    const auto a = impl.vocab.find(left);
    const auto b = impl.vocab.find(right);
    const auto merged = impl.vocab.find(left + right);
    if (a == impl.vocab.end() || b == impl.vocab.end() || merged == impl.vocab.end())
      throw Error(at + ": a token of the merge or its result is not in the vocabulary");
    // The first (lowest) rank of a pair wins, as in Hugging Face's loader.
    impl.merges.emplace(HfTokenizer::Impl::pair_key(a->second, b->second),
                        std::make_pair(static_cast<int32_t>(rank), merged->second));
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto found = impl.vocab.find(name);
    impl.byte_token_ids[static_cast<std::size_t>(b)] = found == impl.vocab.end() ? -1 : found->second;
  }
}

}  // namespace

HfTokenizer HfTokenizer::from_json_text(const std::string& tokenizer_json, const std::string& config_json,
                                        const std::string& where) {
  const Json root = base::parse_json_limited(tokenizer_json, where + "/tokenizer.json");
  const std::string file = where + "/tokenizer.json";
  if (!root.is_object()) throw Error(file + ": expected a JSON object");
  auto impl = std::make_shared<Impl>();
  impl->where = file;
  load_bpe_model(hf::require_key(root, "model", file), *impl, file + ": model");

  if (root.contains("added_tokens") && !root.at("added_tokens").is_null()) {
    const Json& list = root.at("added_tokens");
    if (!list.is_array()) throw Error(file + ": added_tokens: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = file + ": added_tokens[" + std::to_string(i) + "]";
      const Json& entry = list[i];
      AddedToken token;
      token.content = hf::string_at(entry, "content", at);
      const Json& id = hf::require_key(entry, "id", at);
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= kMaxTokenIds)
        throw Error(at + ".id: expected an id in [0, " + std::to_string(kMaxTokenIds) + ")");
      token.id = id.get<int64_t>();
      token.special = hf::bool_or(entry, "special", false, at);
      token.lstrip = hf::bool_or(entry, "lstrip", false, at);
      token.rstrip = hf::bool_or(entry, "rstrip", false, at);
      if (token.content.empty()) throw Error(at + ".content: an added token cannot be empty");
      if (!base::is_valid_utf8(token.content)) throw Error(at + ".content: not valid UTF-8");
      if (hf::bool_or(entry, "single_word", false, at)) throw Error(at + ".single_word: true is not supported");
      if (hf::bool_or(entry, "normalized", !token.special, at) && root.contains("normalizer") &&
          !root.at("normalizer").is_null())
        throw Error(at + ".normalized: true with a normalizer is not supported (matched on normalised text)");
      impl->vocab[token.content] = token.id;
      impl->added.push_back(std::move(token));
    }
  }
  int64_t size = 0;
  for (const auto& [token, id] : impl->vocab) size = std::max(size, id + 1);
  impl->id_to_token.assign(static_cast<std::size_t>(size), std::string());
  for (const auto& [token, id] : impl->vocab) impl->id_to_token[static_cast<std::size_t>(id)] = token;
  impl->added_id.assign(static_cast<std::size_t>(size), false);
  impl->special_id.assign(static_cast<std::size_t>(size), false);
  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    const auto& token = impl->added[i];
    impl->id_to_token[static_cast<std::size_t>(token.id)] = token.content;
    impl->added_id[static_cast<std::size_t>(token.id)] = true;
    if (token.special) impl->special_id[static_cast<std::size_t>(token.id)] = true;
    impl->added_by_first_byte[static_cast<unsigned char>(token.content[0])].push_back(i);
  }
  for (auto& bucket : impl->added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::size_t a, std::size_t b) {
      return impl->added[a].content.size() > impl->added[b].content.size();
    });
  }

  hf::PipelineShape normalizer_shape, pre_tokenizer_shape, decoder_shape;
  if (root.contains("normalizer") && !root.at("normalizer").is_null())
    impl->normalizer = hf::make_normalizer(root.at("normalizer"), file + ": normalizer", normalizer_shape);
  if (root.contains("pre_tokenizer") && !root.at("pre_tokenizer").is_null())
    impl->pre_tokenizer =
        hf::make_pre_tokenizer(root.at("pre_tokenizer"), file + ": pre_tokenizer", pre_tokenizer_shape);
  if (root.contains("decoder") && !root.at("decoder").is_null())
    impl->decoder = hf::make_decoder(root.at("decoder"), file + ": decoder", decoder_shape);

  if (!config_json.empty()) {
    const std::string config_file = where + "/tokenizer_config.json";
    const Json config = base::parse_json_limited(config_json, config_file);
    if (!config.is_object()) throw Error(config_file + ": expected a JSON object");
    impl->bos = config_token_id(config, "bos_token", *impl, config_file);
    impl->eos = config_token_id(config, "eos_token", *impl, config_file);
    impl->pad = config_token_id(config, "pad_token", *impl, config_file);
    impl->clean_up_spaces = hf::bool_or(config, "clean_up_tokenization_spaces", false, config_file);
  }
  return HfTokenizer(std::move(impl));
}

HfTokenizer HfTokenizer::load(const std::string& directory) {
  const std::filesystem::path dir(directory);
  std::error_code error;
  if (!std::filesystem::exists(dir / "tokenizer.json", error))
    throw Error(directory + ": no tokenizer.json (a Hugging Face model directory has one)");
  const auto config_path = dir / "tokenizer_config.json";
  const std::string config =
      std::filesystem::exists(config_path, error) ? base::read_small_file(config_path) : std::string();
  auto tokenizer = from_json_text(base::read_small_file(dir / "tokenizer.json"), config, directory);
  const auto generation_path = dir / "generation_config.json";
  if (!std::filesystem::exists(generation_path, error)) return tokenizer;
  const auto generation = base::parse_json_limited(base::read_small_file(generation_path), generation_path.string());
  if (!generation.is_object()) throw Error(generation_path.string() + ": expected a JSON object");
  auto impl = std::make_shared<Impl>(*tokenizer.impl_);
  const auto add_stop = [&](const Json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tokenizer.vocab_size())
      throw Error(generation_path.string() + ": eos_token_id " + base::dump_json(id) +
                  " is not an id of the tokenizer (0 to " + std::to_string(tokenizer.vocab_size() - 1) + ")");
    if (std::find(impl->stop.begin(), impl->stop.end(), id.get<int64_t>()) == impl->stop.end())
      impl->stop.push_back(id.get<int64_t>());
  };
  if (generation.contains("eos_token_id") && !generation.at("eos_token_id").is_null()) {
    const auto& ids = generation.at("eos_token_id");
    if (ids.is_array()) {
      for (const auto& id : ids) add_stop(id);
    } else {
      add_stop(ids);
    }
  }
  // A tokenizer_config.json without eos_token: the first stop id is EOS.
  if (impl->eos < 0 && !impl->stop.empty()) impl->eos = impl->stop.front();
  return HfTokenizer(std::move(impl));
}

std::vector<int64_t> HfTokenizer::encode(std::string_view text) const {
  return impl_->encode(text, false);
}

std::vector<int64_t> HfTokenizer::encode_with_special_tokens(std::string_view text) const {
  return impl_->encode(text, true);
}

std::vector<int64_t> HfTokenizer::encode_template(const std::vector<std::string_view>& parts) const {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> untrusted;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto begin = text.size();
    // Each part on its own: the ranges must index the sanitised text.
    text += base::replace_invalid_utf8(parts[i]);
    if (i % 2 == 1 && text.size() > begin) untrusted.emplace_back(begin, text.size());
  }
  return impl_->encode_sanitised(text, true, untrusted);
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::vector<hf::DecodeToken> tokens;
  tokens.reserve(ids.size());
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw Error("decode: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab_size()) + ")");
    const auto index = static_cast<std::size_t>(id);
    if (skip_special && impl_->special_id[index]) continue;
    tokens.push_back({impl_->id_to_token[index], impl_->added_id[index]});
  }
  std::string text;
  if (impl_->decoder) {
    std::size_t input_bytes = 0;
    for (const auto& token : tokens) input_bytes += token.text.size();
    const hf::OutputBound bound(input_bytes);
    for (const auto& token : (*impl_->decoder)(std::move(tokens), bound)) text += token.text;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) text += (i == 0 ? "" : " ") + tokens[i].text;
  }
  return impl_->clean_up_spaces ? hf::clean_up_tokenization(std::move(text)) : text;
}

int64_t HfTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->id_to_token.size());
}
int64_t HfTokenizer::bos_id() const {
  return impl_->bos;
}
int64_t HfTokenizer::eos_id() const {
  return impl_->eos;
}
int64_t HfTokenizer::pad_id() const {
  return impl_->pad;
}
std::vector<int64_t> HfTokenizer::stop_ids() const {
  if (impl_->eos < 0) return impl_->stop;
  std::vector<int64_t> ids = {impl_->eos};
  for (const auto id : impl_->stop)
    if (id != impl_->eos) ids.push_back(id);
  return ids;
}

std::optional<int64_t> HfTokenizer::special_id(std::string_view name) const {
  for (const auto& token : impl_->added) {
    if (token.content == name) return token.id;
  }
  return std::nullopt;
}

bool HfTokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special_id[static_cast<std::size_t>(id)];
}

const std::string& HfTokenizer::token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) throw Error("token: id " + std::to_string(id) + " is outside the vocabulary");
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

std::optional<int64_t> HfTokenizer::token_id(std::string_view token) const {
  const auto found = impl_->vocab.find(std::string(token));
  if (found == impl_->vocab.end()) return std::nullopt;
  return found->second;
}

}  // namespace sao::tokenizer
