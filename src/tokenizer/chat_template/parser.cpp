#include "tokenizer/chat_template/parser.hpp"

#include "tokenizer/chat_template/lexer.hpp"

#include <algorithm>
#include <stdexcept>

namespace sao::tokenizer::jinja {

const std::vector<std::string>& known_functions() {
  static const std::vector<std::string> names = {"namespace", "raise_exception", "range", "dict"};
  return names;
}

namespace {

const std::vector<std::string>& known_filters() {
  static const std::vector<std::string> names = {
      "trim",   "tojson",  "length", "count",      "string",     "upper",      "lower", "first",     "last",
      "join",   "reverse", "list",   "default",    "d",          "capitalize", "title", "replace",   "items",
      "int",    "float",   "abs",    "safe",       "unique",     "indent",     "sort",  "wordcount", "e",
      "escape", "select",  "reject", "selectattr", "rejectattr", "map"};
  return names;
}

const std::vector<std::string>& known_tests() {
  static const std::vector<std::string> names = {"defined", "undefined", "none",     "string",   "number",  "integer",
                                                 "float",   "mapping",   "iterable", "sequence", "boolean", "true",
                                                 "false",   "odd",       "even",     "equalto",  "eq",      "ne",
                                                 "in",      "callable",  "lower",    "upper"};
  return names;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string where) : tokens_(std::move(tokens)), where_(std::move(where)) {}

  ExprPtr expression() { return ternary(); }
  // A for loop's iterable: `if` after it filters the loop, not a ternary.
  ExprPtr expression_without_condition() { return or_expr(); }
  bool at_end() const { return peek().type == Token::Type::kEnd; }
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(position_ + ahead, tokens_.size() - 1)]; }
  bool peek_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::kName && peek(ahead).text == name;
  }
  bool peek_op(const char* op) const { return peek().type == Token::Type::kOperator && peek().text == op; }
  Token next() { return tokens_[std::min(position_++, tokens_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& message) const { Failure(where_, peek().line)(message); }
  void expect_op(const char* op) {
    if (!peek_op(op)) fail(std::string("expected '") + op + "', got '" + describe(peek()) + "'");
    next();
  }
  std::string expect_name() {
    if (peek().type != Token::Type::kName) fail("expected a name, got '" + describe(peek()) + "'");
    return next().text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + describe(peek()) + "'");
  }
  static std::string describe(const Token& token) {
    return token.type == Token::Type::kEnd ? "end of tag" : token.text;
  }

 private:
  std::shared_ptr<Expr> node(Expr::Type type) {
    auto e = std::make_shared<Expr>();
    e->type = type;
    e->line = peek().line;
    return e;
  }
  // The depth of a finished node, bounded: a chain of 10^5 filters or
  // operators parses without recursion but would be evaluated (and freed)
  // by one call per level, so it is refused here like deep parentheses.
  ExprPtr sealed(const std::shared_ptr<Expr>& e) {
    int deepest = 0;
    for (const auto& child : e->children)
      if (child) deepest = std::max(deepest, child->depth);
    for (const auto& entry : e->keywords) deepest = std::max(deepest, entry.second->depth);
    e->depth = deepest + 1;
    if (e->depth > kMaxNesting) fail("expressions nest deeper than " + std::to_string(kMaxNesting));
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right) {
    auto e = node(Expr::Type::kBinary);
    e->name = op;
    e->children = {std::move(left), std::move(right)};
    return sealed(e);
  }

  ExprPtr ternary() {
    const DepthGuard guard(*this);
    auto value = or_expr();
    while (peek_name("if")) {
      next();
      auto condition = or_expr();
      ExprPtr otherwise;
      if (peek_name("else")) {
        next();
        otherwise = ternary();
      } else {
        auto undefined = node(Expr::Type::kLiteral);
        otherwise = undefined;
      }
      auto e = node(Expr::Type::kTernary);
      e->children = {condition, value, otherwise};
      value = sealed(e);
    }
    return value;
  }
  ExprPtr or_expr() {
    auto left = and_expr();
    while (peek_name("or")) {
      next();
      left = binary("or", left, and_expr());
    }
    return left;
  }
  ExprPtr and_expr() {
    auto left = not_expr();
    while (peek_name("and")) {
      next();
      left = binary("and", left, not_expr());
    }
    return left;
  }
  ExprPtr not_expr() {
    const DepthGuard guard(*this);
    if (peek_name("not")) {
      next();
      auto e = node(Expr::Type::kUnary);
      e->name = "not";
      e->children = {not_expr()};
      return sealed(e);
    }
    return compare();
  }
  ExprPtr compare() {
    auto left = concat();
    for (;;) {
      if (peek().type == Token::Type::kOperator && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                                    peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        const auto op = next().text;
        left = binary(op, left, concat());
      } else if (peek_name("in")) {
        next();
        left = binary("in", left, concat());
      } else if (peek_name("not") && peek_name("in", 1)) {
        next();
        next();
        left = binary("not in", left, concat());
      } else {
        return left;
      }
    }
  }
  ExprPtr concat() {
    auto left = sum();
    while (peek_op("~")) {
      next();
      left = binary("~", left, sum());
    }
    return left;
  }
  ExprPtr sum() {
    auto left = product();
    while (peek_op("+") || peek_op("-")) {
      const auto op = next().text;
      left = binary(op, left, product());
    }
    return left;
  }
  ExprPtr product() {
    auto left = power();
    while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%")) {
      const auto op = next().text;
      left = binary(op, left, power());
    }
    return left;
  }
  // As in jinja2, ** binds tighter than * but takes unary operands and
  // groups from the left: -2 ** 2 is 4 and 2 ** 3 ** 2 is 64.
  ExprPtr power() {
    auto left = unary();
    while (peek_op("**")) {
      next();
      left = binary("**", left, unary());
    }
    return left;
  }
  ExprPtr unary() {
    const DepthGuard guard(*this);
    if (peek_op("-") || peek_op("+")) {
      const auto op = next().text;
      auto e = node(Expr::Type::kUnary);
      e->name = op;
      e->children = {unary()};
      return sealed(e);
    }
    return filtered(postfix(primary()));
  }

  void arguments(Expr& call) {
    expect_op("(");
    while (!peek_op(")")) {
      if (peek().type == Token::Type::kName && peek(1).type == Token::Type::kOperator && peek(1).text == "=") {
        const auto key = next().text;
        next();
        call.keywords.emplace_back(key, expression());
      } else {
        if (!call.keywords.empty()) fail("a positional argument after a keyword argument");
        call.children.push_back(expression());
      }
      if (!peek_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr filtered(ExprPtr value) {
    for (;;) {
      if (peek_op("|")) {
        next();
        auto e = node(Expr::Type::kFilter);
        e->name = expect_name();
        const auto& filters = known_filters();
        if (std::find(filters.begin(), filters.end(), e->name) == filters.end())
          fail("filter '" + e->name + "' is not supported");
        e->children.push_back(value);
        if (peek_op("(")) arguments(*e);
        value = sealed(e);
      } else if (peek_name("is")) {
        next();
        auto e = node(Expr::Type::kTest);
        if (peek_name("not")) {
          next();
          e->negated = true;
        }
        e->name = expect_name();
        const auto& tests = known_tests();
        if (std::find(tests.begin(), tests.end(), e->name) == tests.end())
          fail("test '" + e->name + "' is not supported");
        e->children.push_back(value);
        if (peek_op("(")) {
          arguments(*e);
        } else if (peek().type == Token::Type::kString || peek().type == Token::Type::kInt ||
                   (peek().type == Token::Type::kName && !peek_name("and") && !peek_name("or") && !peek_name("else") &&
                    !peek_name("if") && !peek_name("in") && !peek_name("not"))) {
          e->children.push_back(postfix(primary()));  // `is equalto 3`, `x is sameas y`
        }
        value = sealed(e);
      } else {
        return value;
      }
    }
  }

  ExprPtr postfix(ExprPtr value) {
    for (;;) {
      if (peek_op(".")) {
        next();
        auto e = node(Expr::Type::kAttribute);
        e->name = expect_name();
        e->children = {value};
        value = sealed(e);
      } else if (peek_op("[")) {
        next();
        ExprPtr parts[3];
        bool slice = false;
        int part = 0;
        while (!peek_op("]")) {
          if (peek_op(":")) {
            next();
            slice = true;
            if (++part > 2) fail("a slice has at most three parts");
            continue;
          }
          parts[part] = expression();
        }
        expect_op("]");
        auto e = node(slice ? Expr::Type::kSlice : Expr::Type::kIndex);
        e->children = {value, parts[0], parts[1], parts[2]};
        if (!slice && !parts[0]) fail("empty subscript");
        value = sealed(e);
      } else if (peek_op("(")) {
        auto e = node(Expr::Type::kCall);
        e->children.push_back(value);
        arguments(*e);
        value = sealed(e);
      } else {
        return value;
      }
    }
  }

  // Nesting is bounded so a hostile template cannot exhaust the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting) parser_.fail("expressions nest deeper than " + std::to_string(kMaxNesting));
    }
    ~DepthGuard() { --parser_.depth_; }
    Parser& parser_;
  };
  static constexpr int kMaxNesting = 200;

  ExprPtr primary() {
    const DepthGuard guard(*this);
    const Token token = next();
    auto literal = [&](Value v) {
      auto e = std::make_shared<Expr>();
      e->type = Expr::Type::kLiteral;
      e->line = token.line;
      e->literal = std::move(v);
      return e;
    };
    switch (token.type) {
      case Token::Type::kString: {
        std::string text = token.text;
        while (peek().type == Token::Type::kString) text += next().text;  // adjacent literals join
        return literal(Value::of(text));
      }
      case Token::Type::kInt:
      case Token::Type::kFloat:
        try {
          if (token.type == Token::Type::kFloat) return literal(Value::of_float(std::stod(token.text)));
          return literal(Value::of(static_cast<int64_t>(std::stoll(token.text))));
        } catch (const std::out_of_range&) {
          Failure(where_, token.line)("number " + token.text + " is out of range");
        }
      case Token::Type::kName: {
        if (token.text == "true" || token.text == "True") return literal(Value::of(true));
        if (token.text == "false" || token.text == "False") return literal(Value::of(false));
        if (token.text == "none" || token.text == "None") return literal(Value::none());
        auto e = std::make_shared<Expr>();
        e->type = Expr::Type::kName;
        e->line = token.line;
        e->name = token.text;
        return e;
      }
      case Token::Type::kOperator:
        if (token.text == "(") {
          auto inner = expression();
          if (peek_op(",")) {  // a tuple: a list for our purposes
            auto list = std::make_shared<Expr>();
            list->type = Expr::Type::kList;
            list->line = token.line;
            list->children.push_back(inner);
            while (peek_op(",")) {
              next();
              if (peek_op(")")) break;
              list->children.push_back(expression());
            }
            expect_op(")");
            return sealed(list);
          }
          expect_op(")");
          return inner;
        }
        if (token.text == "[") {
          auto list = std::make_shared<Expr>();
          list->type = Expr::Type::kList;
          list->line = token.line;
          while (!peek_op("]")) {
            list->children.push_back(expression());
            if (!peek_op(",")) break;
            next();
          }
          expect_op("]");
          return sealed(list);
        }
        if (token.text == "{") {
          auto dict = std::make_shared<Expr>();
          dict->type = Expr::Type::kDict;
          dict->line = token.line;
          while (!peek_op("}")) {
            if (peek().type != Token::Type::kString) fail("dict keys must be string literals");
            const auto key = next().text;
            expect_op(":");
            dict->keywords.emplace_back(key, expression());
            if (!peek_op(",")) break;
            next();
          }
          expect_op("}");
          return sealed(dict);
        }
        break;
      default:
        break;
    }
    Failure(where_, token.line)("unexpected '" + describe(token) + "'");
  }

  std::vector<Token> tokens_;
  size_t position_ = 0;
  int depth_ = 0;
  std::string where_;
};

class TreeBuilder {
 public:
  TreeBuilder(std::vector<TemplatePiece> pieces, std::string where)
      : pieces_(std::move(pieces)), where_(std::move(where)) {}

  Body build() {
    std::string stop;
    auto body = parse_body({}, &stop);
    if (!stop.empty()) Failure(where_, line_)("'" + stop + "' without an opening tag");
    return body;
  }

 private:
  // Parses until one of `stops` (a statement keyword) and returns it in `stop`.
  Body parse_body(const std::vector<std::string>& stops, std::string* stop, Parser** stop_parser = nullptr) {
    // Bounded so that 10^5 nested ifs are an error, not a stack overflow.
    struct Nesting {
      explicit Nesting(TreeBuilder& builder) : builder_(builder) {
        if (++builder_.nesting_ > 100) Failure(builder_.where_, builder_.line_)("blocks nest deeper than 100");
      }
      ~Nesting() { --builder_.nesting_; }
      TreeBuilder& builder_;
    } nesting(*this);
    Body body;
    while (index_ < pieces_.size()) {
      const auto& piece = pieces_[index_++];
      line_ = piece.line;
      auto node = std::make_shared<Node>();
      node->line = piece.line;
      if (piece.type == TemplatePiece::Type::kText) {
        node->type = Node::Type::kText;
        node->text = piece.text;
        body.push_back(node);
        continue;
      }
      if (piece.type == TemplatePiece::Type::kOutput) {
        Parser parser(lex_expression(piece.text, piece.line, where_), where_);
        node->type = Node::Type::kOutput;
        node->expr = parser.expression();
        parser.expect_end();
        body.push_back(node);
        continue;
      }
      parsers_.push_back(std::make_unique<Parser>(lex_expression(piece.text, piece.line, where_), where_));
      Parser& parser = *parsers_.back();
      const std::string keyword = parser.expect_name();
      if (std::find(stops.begin(), stops.end(), keyword) != stops.end()) {
        *stop = keyword;
        if (stop_parser != nullptr) *stop_parser = &parser;
        return body;
      }
      if (keyword == "if") {
        node->type = Node::Type::kIf;
        auto condition = parser.expression();
        parser.expect_end();
        for (;;) {
          std::string ended;
          Parser* at = nullptr;
          auto branch = parse_body({"elif", "else", "endif"}, &ended, &at);
          node->branches.emplace_back(condition, std::move(branch));
          if (ended.empty()) Failure(where_, piece.line)("'if' is never closed with 'endif'");
          if (ended == "endif") {
            at->expect_end();
            break;
          }
          if (ended == "else") {
            at->expect_end();
            condition = nullptr;
            auto last = parse_body({"endif"}, &ended, &at);
            if (ended.empty()) Failure(where_, piece.line)("'if' is never closed with 'endif'");
            at->expect_end();
            node->branches.emplace_back(nullptr, std::move(last));
            break;
          }
          condition = at->expression();
          at->expect_end();
        }
      } else if (keyword == "for") {
        node->type = Node::Type::kFor;
        node->targets.push_back(parser.expect_name());
        while (parser.peek_op(",")) {
          parser.next();
          node->targets.push_back(parser.expect_name());
        }
        if (!parser.peek_name("in")) parser.fail("expected 'in' in the for statement");
        parser.next();
        node->expr = parser.expression_without_condition();
        if (parser.peek_name("if")) {
          parser.next();
          node->filter = parser.expression();
        }
        if (parser.peek_name("recursive")) parser.fail("recursive loops are not supported");
        parser.expect_end();
        std::string ended;
        Parser* at = nullptr;
        node->body = parse_body({"else", "endfor"}, &ended, &at);
        if (ended.empty()) Failure(where_, piece.line)("'for' is never closed with 'endfor'");
        at->expect_end();
        if (ended == "else") {
          node->else_body = parse_body({"endfor"}, &ended, &at);
          if (ended.empty()) Failure(where_, piece.line)("'for' is never closed with 'endfor'");
          at->expect_end();
        }
      } else if (keyword == "set") {
        node->type = Node::Type::kSet;
        node->targets.push_back(parser.expect_name());
        if (parser.peek_op(".")) {
          parser.next();
          node->targets.push_back(parser.expect_name());
        }
        if (!parser.peek_op("=")) parser.fail("block assignments ({% set x %}...{% endset %}) are not supported");
        parser.next();
        node->expr = parser.expression();
        parser.expect_end();
      } else if (keyword == "break" || keyword == "continue") {
        node->type = keyword == "break" ? Node::Type::kBreak : Node::Type::kContinue;
        parser.expect_end();
      } else {
        parser.fail("statement '" + keyword + "' is not supported");
      }
      body.push_back(node);
    }
    return body;
  }

  std::vector<TemplatePiece> pieces_;
  size_t index_ = 0;
  int nesting_ = 0;
  int line_ = 1;
  std::string where_;
  std::vector<std::unique_ptr<Parser>> parsers_;
};

}  // namespace

Body parse_template(const std::string& source, const std::string& where) {
  return TreeBuilder(split_pieces(preprocess(source), where), where).build();
}

}  // namespace sao::tokenizer::jinja
