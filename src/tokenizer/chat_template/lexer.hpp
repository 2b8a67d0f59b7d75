// The first stages of reading a chat template: Hugging Face's
// preprocessing, the split into text, {{ expression }} and {% statement %}
// pieces, and the tokens of one expression or statement.
#pragma once

#include <string>
#include <vector>

namespace sao::tokenizer::jinja {

struct Token {
  enum class Type { kName, kString, kInt, kFloat, kOperator, kEnd };
  Type type = Type::kEnd;
  std::string text;
  int line = 1;
};

std::vector<Token> lex_expression(const std::string& code, int line, const std::string& where);

struct TemplatePiece {
  enum class Type { kText, kOutput, kStatement };
  Type type;
  std::string text;
  int line;
};

// Hugging Face's preprocessing of a chat template before Jinja sees it:
// one trailing newline dropped; lstrip_blocks (spaces and tabs before a
// {% or {# that starts a line); trim_blocks (the newline after %}, #} or
// -}); transformers' {% generation %} / {% endgeneration %} tags, which
// mark assistant text for masks, removed (honouring their -).
std::string preprocess(std::string source);

std::vector<TemplatePiece> split_pieces(const std::string& source, const std::string& where);

}  // namespace sao::tokenizer::jinja
