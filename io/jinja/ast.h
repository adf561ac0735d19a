// The parsed template: expressions and statements as jinja2's parser builds them, with the line
// each came from for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/jinja/value.h"

namespace e3::jinja::detail {

class Interp;
struct CallArgs;
// A filter or test: `target` is the value filtered or tested, `args` the rest.
using Builtin = Value (*)(Interp&, const Value& target, CallArgs& args);

enum class ExprKind : uint8_t {
  Const, Name, List, Tuple, Dict, Neg, Pos, Not, Bin, And, Or, Compare,
  GetAttr, GetItem, Slice, Call, Filter, Test, Cond
};
enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat };
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;       // Const
  std::string name;  // Name, GetAttr's attribute, Filter / Test name
  BinOp op = BinOp::Add;
  std::vector<CmpOp> cmp;  // Compare: one per operand after the first
  // Operands. Bin: [l, r]; Compare: [first, ...]; GetAttr: [obj]; GetItem: [obj, key];
  // Slice: [obj, start?, stop?, step?] (null when absent); Call: [callee, args...];
  // Filter / Test: [target (null inside a filter block or set block), args...];
  // Cond: [test, then, else?]; List / Tuple: items; Dict: key, value, key, value...
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call / Filter / Test
  Builtin builtin = nullptr;                            // Filter / Test, when the name is known
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind : uint8_t {
  Data, Print, If, For, Set, SetAttr, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Generation, With
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when none
  Body body;
  // As jinja2 decides from the body: a macro accepts extra positional / keyword arguments only
  // when its body reads `varargs` / `kwargs`.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  Value data;  // Data: the text, a ready string value
  ExprPtr expr;  // Print, For (iterable), Set (value), CallBlock (the call), SetAttr (value)
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (test, body) for if and each elif
  Body body, else_body;
  std::vector<std::string> targets;  // For / Set / SetBlock names; SetAttr: {namespace, attribute}
  bool tuple_target = false;
  ExprPtr cond;     // For: `if` filter
  bool recursive = false;
  ExprPtr filter;   // SetBlock / FilterBlock: the filter chain, innermost target null
  std::shared_ptr<MacroDef> macro;  // Macro; CallBlock: the caller's params and body
  std::vector<std::pair<std::string, ExprPtr>> assigns;  // With
};

struct Program {
  std::string name;
  Body body;
};

// Throws e3::Error(ErrorKind::Input) "NAME:LINE:COL: what".
std::shared_ptr<Program> parse_program(std::string_view source, std::string name);

Builtin find_filter(const std::string& name);
Builtin find_test(const std::string& name);

}  // namespace e3::jinja::detail
