// The tree a chat template parses into: expressions and statements.
#pragma once

#include "tokenizer/chat_template/value.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sao::tokenizer::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Type {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttribute,  // a.name
    kIndex,      // a[b]
    kSlice,      // a[b:c:d]
    kCall,
    kFilter,
    kTest,
    kUnary,   // not, -
    kBinary,  // + - * / // % ~ == != < > <= >= in, not in, and, or
    kTernary,
  };
  Type type = Type::kLiteral;
  int line = 1;
  Value literal;
  std::string name;               // name, attribute, filter, test, operator
  std::vector<ExprPtr> children;  // operands, list items, call/filter arguments (after the receiver)
  std::vector<std::pair<std::string, ExprPtr>> keywords;  // call/filter keyword arguments; dict entries
  bool negated = false;                                   // `is not`
  int depth = 1;                                          // levels of nodes down to the deepest leaf
};

struct Node;
using Body = std::vector<std::shared_ptr<const Node>>;

struct Node {
  enum class Type { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
  Type type = Type::kText;
  int line = 1;
  std::string text;
  ExprPtr expr;                                    // output, set value, for iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // if/elif (condition null for else)
  std::vector<std::string> targets;                // for: loop variables; set: name [, attribute]
  ExprPtr filter;                                  // for ... if condition
  Body body;                                       // for body
  Body else_body;                                  // for ... else
};

// The builtin functions a template may call by name.
const std::vector<std::string>& known_functions();

// Parses a preprocessed template; throws sao::Error "WHERE: line N: ..."
// for a syntax error or an unsupported statement, filter, test or function.
Body parse_template(const std::string& source, const std::string& where);

}  // namespace sao::tokenizer::jinja
