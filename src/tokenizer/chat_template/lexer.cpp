#include "tokenizer/chat_template/lexer.hpp"

#include "base/utf8.hpp"
#include "tokenizer/chat_template/value.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace sao::tokenizer::jinja {

std::vector<Token> lex_expression(const std::string& code, int line, const std::string& where) {
  std::vector<Token> tokens;
  size_t i = 0;
  const auto fail = [&](const std::string& message) { Failure(where, line)(message); };
  while (i < code.size()) {
    const char c = code[i];
    if (c == '\n') ++line;
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token token;
    token.line = line;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = i;
      while (end < code.size() && (std::isalnum(static_cast<unsigned char>(code[end])) || code[end] == '_')) ++end;
      token.type = Token::Type::kName;
      token.text = code.substr(i, end - i);
      i = end;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = i;
      while (end < code.size() && std::isdigit(static_cast<unsigned char>(code[end]))) ++end;
      token.type = Token::Type::kInt;
      if (end + 1 < code.size() && code[end] == '.' && std::isdigit(static_cast<unsigned char>(code[end + 1]))) {
        ++end;
        while (end < code.size() && std::isdigit(static_cast<unsigned char>(code[end]))) ++end;
        token.type = Token::Type::kFloat;
      }
      token.text = code.substr(i, end - i);
      i = end;
    } else if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < code.size() && code[j] != c; ++j) {
        if (code[j] == '\n') ++line;
        if (code[j] != '\\' || j + 1 >= code.size()) {
          text += code[j];
          continue;
        }
        const char escaped = code[++j];
        switch (escaped) {
          case 'n':
            text += '\n';
            break;
          case 't':
            text += '\t';
            break;
          case 'r':
            text += '\r';
            break;
          case 'b':
            text += '\b';
            break;
          case 'f':
            text += '\f';
            break;
          case 'v':
            text += '\v';
            break;
          case '\\':
          case '\'':
          case '"':
            text += escaped;
            break;
          case 'x':
          case 'u': {
            const size_t digits = escaped == 'x' ? 2 : 4;
            const std::string hex = code.substr(j + 1, digits);
            if (hex.size() != digits || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
              fail(std::string("invalid escape \\") + escaped + hex);
            text += base::encode_utf8(static_cast<uint32_t>(std::stoul(hex, nullptr, 16)));
            j += digits;
            break;
          }
          default:
            text += '\\';
            text += escaped;
        }
      }
      if (j >= code.size()) fail("unterminated string literal");
      token.type = Token::Type::kString;
      token.text = text;
      i = j + 1;
    } else {
      static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                               ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", "="};
      token.type = Token::Type::kOperator;
      for (const char* op : kOperators) {
        if (code.compare(i, std::char_traits<char>::length(op), op) == 0) {
          token.text = op;
          break;
        }
      }
      if (token.text.empty()) fail(std::string("unexpected character '") + c + "'");
      i += token.text.size();
    }
    tokens.push_back(std::move(token));
  }
  Token end;
  end.line = line;
  tokens.push_back(end);
  return tokens;
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

// Written as loops, not regexes: std::regex recurses per character and a
// long template could exhaust the stack.
std::string preprocess(std::string source) {
  if (!source.empty() && source.back() == '\n') source.pop_back();
  std::string stripped;
  stripped.reserve(source.size());
  for (size_t i = 0; i < source.size();) {
    if (i == 0 || source[i - 1] == '\n') {
      size_t j = i;
      while (j < source.size() && (source[j] == ' ' || source[j] == '\t')) ++j;
      if (j + 1 < source.size() && source[j] == '{' &&
          (source[j + 1] == '%' || source[j + 1] == '#' || source[j + 1] == '-'))
        i = j;
    }
    stripped += source[i];
    // trim_blocks
    if (source[i] == '}' && i >= 1 && (source[i - 1] == '%' || source[i - 1] == '#' || source[i - 1] == '-') &&
        i + 1 < source.size() && source[i + 1] == '\n') {
      i += 2;
      continue;
    }
    ++i;
  }
  std::string out;
  out.reserve(stripped.size());
  size_t last = 0;
  for (size_t open = stripped.find("{%"); open != std::string::npos; open = stripped.find("{%", open + 2)) {
    size_t j = open + 2;
    const bool left_trim = j < stripped.size() && stripped[j] == '-';
    if (left_trim) ++j;
    while (j < stripped.size() && is_space(stripped[j])) ++j;
    const char* names[] = {"generation", "endgeneration"};
    size_t name_end = std::string::npos;
    for (const char* name : names) {
      const size_t length = std::char_traits<char>::length(name);
      if (stripped.compare(j, length, name) == 0) name_end = j + length;
    }
    if (name_end == std::string::npos) continue;
    j = name_end;
    while (j < stripped.size() && is_space(stripped[j])) ++j;
    const bool right_trim = j < stripped.size() && stripped[j] == '-';
    if (right_trim) ++j;
    if (stripped.compare(j, 2, "%}") != 0) continue;
    size_t end = open;
    if (left_trim)
      while (end > last && is_space(stripped[end - 1])) --end;
    out += stripped.substr(last, end - last);
    last = j + 2;
    if (right_trim)
      while (last < stripped.size() && is_space(stripped[last])) ++last;
    open = last - 2;
  }
  return out + stripped.substr(last);
}

std::vector<TemplatePiece> split_pieces(const std::string& source, const std::string& where) {
  std::vector<TemplatePiece> pieces;
  size_t i = 0;
  int line = 1;
  bool strip_next_text = false;
  auto count_lines = [](const std::string& text) {
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  };
  while (i < source.size()) {
    size_t open = source.find('{', i);
    while (open != std::string::npos && open + 1 < source.size() && source[open + 1] != '{' &&
           source[open + 1] != '%' && source[open + 1] != '#')
      open = source.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= source.size()) open = source.size();
    std::string text = source.substr(i, open - i);
    if (strip_next_text) {
      size_t start = 0;
      while (start < text.size() && is_space(text[start])) ++start;
      text = text.substr(start);
    }
    strip_next_text = false;
    const int text_line = line;
    line += count_lines(source.substr(i, open - i));
    if (open == source.size()) {
      if (!text.empty()) pieces.push_back({TemplatePiece::Type::kText, text, text_line});
      break;
    }
    const char kind = source[open + 1];
    const std::string closer = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t content_begin = open + 2;
    if (content_begin < source.size() && source[content_begin] == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
      ++content_begin;
    } else if (content_begin < source.size() && source[content_begin] == '+') {
      ++content_begin;
    }
    if (!text.empty()) pieces.push_back({TemplatePiece::Type::kText, text, text_line});
    // The closer is searched outside string literals: '}}' may sit in one.
    size_t close = content_begin;
    char quote = 0;
    for (; close < source.size(); ++close) {
      const char c = source[close];
      if (quote != 0) {
        if (c == '\\') {
          ++close;
        } else if (c == quote) {
          quote = 0;
        }
        continue;
      }
      if (kind != '#' && (c == '\'' || c == '"')) {
        quote = c;
        continue;
      }
      if (source.compare(close, 2, closer) == 0) break;
    }
    if (close >= source.size()) Failure(where, line)("'" + source.substr(open, 2) + "' is never closed");
    size_t content_end = close;
    if (content_end > content_begin && source[content_end - 1] == '-') {
      --content_end;
      strip_next_text = true;
    } else if (content_end > content_begin && source[content_end - 1] == '+') {
      --content_end;
    }
    const std::string content = source.substr(content_begin, content_end - content_begin);
    if (kind == '{') pieces.push_back({TemplatePiece::Type::kOutput, content, line});
    if (kind == '%') pieces.push_back({TemplatePiece::Type::kStatement, content, line});
    line += count_lines(source.substr(open, close + 2 - open));
    i = close + 2;
  }
  return pieces;
}

}  // namespace sao::tokenizer::jinja
