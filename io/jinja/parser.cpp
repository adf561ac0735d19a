// Recursive descent over the lexer's tokens, following jinja2's parser rule for rule (operator
// precedence, where filters and tests bind, tuples, subscripts and slices, call arguments).
#include <algorithm>
#include <set>

#include "core/error.h"
#include "io/jinja/ast.h"
#include "io/jinja/lexer.h"

namespace e3::jinja::detail {

namespace {

// Deeper nesting than this is refused rather than risking the stack (jinja2 itself would hit
// Python's recursion limit).
constexpr int kMaxNesting = 200;
constexpr int kMaxNodesPerTag = 4000;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : t_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) fail_here("unexpected tag");
    return body;
  }

 private:
  // ---- token stream
  const Token& cur() const { return t_[p_]; }
  const Token& look(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  const Token& next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Data: return "template data";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::Name: return "'" + t.value + "'";
      case Tok::String: return "string";
      case Tok::Int: return "integer";
      case Tok::Float: return "float";
      case Tok::Op: return "'" + t.value + "'";
      case Tok::Eof: return "end of template";
    }
    return "token";
  }

  [[noreturn]] void fail_at(const Token& t, const std::string& what) const {
    E3_THROW(ErrorKind::Input, "{}:{}:{}: {}", printable(name_), t.line, t.col, printable(what));
  }
  [[noreturn]] void fail_here(const std::string& what) const { fail_at(cur(), what + ", got " + describe(cur())); }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail_at(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_at(cur(), "expected a name, got " + describe(cur()));
    return next().value;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_at(cur(), "expected the end of the statement block, got " + describe(cur()));
    fail_unknown_names();
    next();
  }

  // jinja2 refuses an unknown filter or test when it compiles the template, except in a "soft"
  // place (an if's test and bodies, a conditional expression) where it fails only if reached;
  // loops' and macros' bodies are hard again. The unknown names of a tag wait here until its end,
  // since `x|f if c else y` turns out to be a conditional expression only after `x|f`.
  struct UnknownName {
    Token at;
    std::string what;
  };
  struct Softness {
    Softness(Parser& p, bool soft) : p_(p), saved_(p.soft_) { p_.soft_ = soft; }
    ~Softness() { p_.soft_ = saved_; }
    Parser& p_;
    bool saved_;
  };
  void note_unknown(const Token& at, std::string what, bool strict) {
    if (strict) fail_at(at, what);
    if (!soft_) unknown_.push_back({at, std::move(what)});
  }
  void fail_unknown_names() {
    if (!unknown_.empty()) fail_at(unknown_.front().at, unknown_.front().what);
  }

  struct Depth {
    Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail_at(p_.cur(), "the template nests too deeply");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // Every node of a tag's expressions counts: a chain (a + b + ..., x.a.b..., v|f|g...) is as deep
  // a tree as nested parentheses are, and the evaluator and the tree's destructor recurse on it.
  ExprPtr make(ExprKind k, int line) {
    if (++nodes_in_tag_ > kMaxNodesPerTag)
      fail_at(cur(), "the tag is too long: more than " + std::to_string(kMaxNodesPerTag) + " operands and operators");
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- statements
  // Parses until a block tag whose name is in `ends` (left unconsumed, after its '{%').
  Body subparse(const std::vector<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (!ends.empty()) fail_at(t, "unexpected end of template: jinja was looking for " + tag_list(ends) +
                                          "; the innermost block that needs closing is '" + open_blocks_.back() + "'");
        return body;
      }
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Data;
        s->line = t.line;
        s->data = Value::string(t.value);
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::VarBegin) {
        nodes_in_tag_ = 0;
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Print;
        s->line = t.line;
        s->expr = parse_tuple(true, {});
        if (cur().type != Tok::VarEnd) fail_here("expected the end of the print statement");
        fail_unknown_names();
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        if (look().type == Tok::Name && std::find(ends.begin(), ends.end(), look().value) != ends.end()) {
          next();  // the '{%'; the caller reads the name
          return body;
        }
        next();
        nodes_in_tag_ = 0;
        body.push_back(parse_statement(ends));
      } else {
        fail_here("unexpected token");
      }
    }
  }

  static std::string tag_list(const std::vector<std::string>& ends) {
    std::string s;
    for (size_t k = 0; k < ends.size(); ++k) s += (k ? " or '" : "'") + ends[k] + "'";
    return s;
  }

  std::unique_ptr<Stmt> parse_statement(const std::vector<std::string>& ends) {
    Depth d(*this);
    const Token& t = cur();
    if (t.type != Tok::Name) fail_at(t, "tag name expected, got " + describe(t));
    const std::string tag = t.value;
    const int line = t.line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    next();
    if (tag == "for") return parse_for(std::move(s));
    if (tag == "if") return parse_if(std::move(s));
    if (tag == "set") return parse_set(std::move(s));
    if (tag == "macro") return parse_macro(std::move(s));
    if (tag == "call") return parse_call_block(std::move(s));
    if (tag == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->filter = parse_filter(nullptr, true, true);
      expect_block_end();
      s->body = parse_block("filter", {"endfilter"});
      return s;
    }
    if (tag == "with") {
      s->kind = StmtKind::With;
      while (cur().type != Tok::BlockEnd) {
        if (!s->assigns.empty()) expect_op(",");
        std::string target = expect_name();
        expect_op("=");
        s->assigns.emplace_back(std::move(target), parse_expression(true));
      }
      next();
      s->body = parse_block("with", {"endwith"});
      return s;
    }
    if (tag == "generation") {
      s->kind = StmtKind::Generation;
      expect_block_end();
      s->body = parse_block("generation", {"endgeneration"});
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(t_[p_ - 1], "'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
      expect_block_end();
      return s;
    }
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block")
      fail_at(t_[p_ - 1], "'" + tag + "' is not supported in a chat template");
    std::string what = "encountered unknown tag '" + tag + "'";
    if (!ends.empty())
      what += "; jinja was looking for " + tag_list(ends) + "; the innermost block that needs closing is '" +
              open_blocks_.back() + "'";
    fail_at(t_[p_ - 1], what);
  }

  // The body of a block up to its end tag, which is consumed with its '%}'.
  Body parse_block(const std::string& block, const std::vector<std::string>& ends) {
    open_blocks_.push_back(block);
    Body b = subparse(ends);
    open_blocks_.pop_back();
    next();  // the end tag's name
    expect_block_end();
    return b;
  }

  std::unique_ptr<Stmt> parse_for(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::For;
    parse_assign_names(s.get());
    if (!skip_name("in")) fail_here("expected 'in'");
    s->expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->cond = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    expect_block_end();
    open_blocks_.push_back("for");
    Softness hard(*this, false);
    ++loop_depth_;
    s->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (next().value == "else") {
      expect_block_end();
      s->else_body = subparse({"endfor"});
      next();
    }
    open_blocks_.pop_back();
    expect_block_end();
    return s;
  }

  void parse_assign_names(Stmt* s) {
    const bool paren = skip_op("(");
    do {
      if (!paren && !s->targets.empty() && cur().type != Tok::Name) break;
      s->targets.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    s->tuple_target = s->targets.size() > 1 || paren;
  }

  std::unique_ptr<Stmt> parse_if(std::unique_ptr<Stmt> s) {
    Softness soft(*this, true);
    s->kind = StmtKind::If;
    open_blocks_.push_back("if");
    ExprPtr test = parse_tuple(false, {});
    expect_block_end();
    while (true) {
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(test), std::move(body));
      const std::string tag = next().value;
      if (tag == "elif") {
        test = parse_tuple(false, {});
        expect_block_end();
        continue;
      }
      if (tag == "else") {
        expect_block_end();
        s->else_body = subparse({"endif"});
        next();
      }
      break;
    }
    open_blocks_.pop_back();
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set(std::unique_ptr<Stmt> s) {
    if (cur().type == Tok::Name && look().type == Tok::Op && look().value == ".") {
      s->kind = StmtKind::SetAttr;
      s->targets.push_back(next().value);
      next();
      s->targets.push_back(expect_name());
      expect_op("=");
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    parse_assign_names(s.get());
    if (skip_op("=")) {
      s->kind = StmtKind::Set;
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    if (s->tuple_target) fail_here("expected '='");
    s->kind = StmtKind::SetBlock;
    if (is_op("|")) s->filter = parse_filter(nullptr, false, true);
    expect_block_end();
    s->body = parse_block("set", {"endset"});
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (skip_op(")")) break;
      m.params.push_back(expect_name());
      if (skip_op("=")) m.defaults.push_back(parse_expression(true));
      else if (!m.defaults.empty() && m.defaults.back()) fail_here("non-default argument follows default argument");
      else m.defaults.push_back(nullptr);
    }
  }

  std::unique_ptr<Stmt> parse_macro(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::Macro;
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = expect_name();
    parse_signature(*s->macro);
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    Softness hard(*this, false);
    s->macro->body = parse_block("macro", {"endmacro"});
    loop_depth_ = saved;
    scan_special_names(*s->macro);
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(std::unique_ptr<Stmt> s) {
    s->kind = StmtKind::CallBlock;
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    if (is_op("(")) parse_signature(*s->macro);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail_at(cur(), "expected a call expression after 'call'");
    expect_block_end();
    Softness hard(*this, false);
    s->macro->body = parse_block("call", {"endcall"});
    scan_special_names(*s->macro);
    return s;
  }

  // ---- which of varargs / kwargs / caller a macro body reads
  static void scan_expr(const Expr* e, MacroDef& m) {
    if (!e) return;
    if (e->kind == ExprKind::Name) {
      if (e->name == "varargs") m.uses_varargs = true;
      if (e->name == "kwargs") m.uses_kwargs = true;
      if (e->name == "caller") m.uses_caller = true;
    }
    for (const auto& a : e->args) scan_expr(a.get(), m);
    for (const auto& [k, a] : e->kwargs) scan_expr(a.get(), m);
  }
  static void scan_body(const Body& body, MacroDef& m) {
    for (const auto& s : body) {
      scan_expr(s->expr.get(), m);
      scan_expr(s->cond.get(), m);
      scan_expr(s->filter.get(), m);
      for (const auto& [t, b] : s->branches) {
        scan_expr(t.get(), m);
        scan_body(b, m);
      }
      scan_body(s->body, m);
      scan_body(s->else_body, m);
      for (const auto& [k, a] : s->assigns) scan_expr(a.get(), m);
      if (s->kind == StmtKind::CallBlock && s->macro) {
        // A call block's own body is the caller's; what it reads of the outer macro still counts.
        for (const auto& d : s->macro->defaults) scan_expr(d.get(), m);
        scan_body(s->macro->body, m);
      }
    }
  }
  static void scan_special_names(MacroDef& m) {
    for (const auto& d : m.defaults) scan_expr(d.get(), m);
    scan_body(m.body, m);
  }

  // ---- expressions
  bool is_tuple_end(const std::vector<std::string>& extra) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.value == ")") return true;
    return t.type == Tok::Name && std::find(extra.begin(), extra.end(), t.value) != extra.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra, bool explicit_parens = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("expected an expression");
    }
    auto e = make(ExprKind::Tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    Depth d(*this);
    const size_t unknown_before = unknown_.size();
    ExprPtr expr1 = parse_or();
    if (is_name("if")) unknown_.resize(unknown_before);
    Softness soft(*this, soft_ || is_name("if"));
    while (is_name("if")) {
      const int line = next().line;
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      auto e = make(ExprKind::Cond, line);
      e->args.push_back(std::move(expr2));
      e->args.push_back(std::move(expr1));
      e->args.push_back(std::move(expr3));
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(ExprKind k, ExprPtr l, ExprPtr r, int line, BinOp op = BinOp::Add) {
    auto e = make(k, line);
    e->op = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  // operand (WORD operand)*, left-associative, for the one-operator levels: `or`, `and`, `~`,
  // `**` (jinja2 parses ** left to right, unlike Python).
  ExprPtr left_chain(ExprPtr (Parser::*operand)(), const char* word, ExprKind kind, BinOp op = BinOp::Add) {
    ExprPtr left = (this->*operand)();
    while (kind == ExprKind::Bin ? is_op(word) : is_name(word)) {
      const int line = next().line;
      left = binary(kind, std::move(left), (this->*operand)(), line, op);
    }
    return left;
  }
  ExprPtr parse_or() { return left_chain(&Parser::parse_and, "or", ExprKind::Or); }
  ExprPtr parse_and() { return left_chain(&Parser::parse_not, "and", ExprKind::And); }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth d(*this);
      const int line = next().line;
      auto e = make(ExprKind::Not, line);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<CmpOp> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      CmpOp op;
      if (is_op("==")) op = CmpOp::Eq;
      else if (is_op("!=")) op = CmpOp::Ne;
      else if (is_op("<")) op = CmpOp::Lt;
      else if (is_op("<=")) op = CmpOp::Le;
      else if (is_op(">")) op = CmpOp::Gt;
      else if (is_op(">=")) op = CmpOp::Ge;
      else if (is_name("in")) op = CmpOp::In;
      else if (is_name("not") && look().type == Tok::Name && look().value == "in") {
        next();
        op = CmpOp::NotIn;
      } else {
        break;
      }
      next();
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(ExprKind::Compare, line);
    e->cmp = std::move(ops);
    e->args.push_back(std::move(first));
    for (auto& o : operands) e->args.push_back(std::move(o));
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinOp op = cur().value == "+" ? BinOp::Add : BinOp::Sub;
      const int line = next().line;
      left = binary(ExprKind::Bin, std::move(left), parse_concat(), line, op);
    }
    return left;
  }
  ExprPtr parse_concat() { return left_chain(&Parser::parse_math2, "~", ExprKind::Bin, BinOp::Concat); }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& v = cur().value;
      const BinOp op = v == "*" ? BinOp::Mul : v == "/" ? BinOp::Div : v == "//" ? BinOp::FloorDiv : BinOp::Mod;
      const int line = next().line;
      left = binary(ExprKind::Bin, std::move(left), parse_pow(), line, op);
    }
    return left;
  }
  ExprPtr parse_pow() { return left_chain(&Parser::parse_filtered_unary, "**", ExprKind::Bin, BinOp::Pow); }
  ExprPtr parse_filtered_unary() { return parse_unary(true); }
  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const bool neg = cur().value == "-";
      const int line = next().line;
      node = make(neg ? ExprKind::Neg : ExprKind::Pos, line);
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    Depth d(*this);
    const Token& t = cur();
    const int line = t.line;
    if (t.type == Tok::Name) {
      next();
      auto e = make(ExprKind::Const, line);
      if (t.value == "true" || t.value == "True") e->value = Value::boolean(true);
      else if (t.value == "false" || t.value == "False") e->value = Value::boolean(false);
      else if (t.value == "none" || t.value == "None") e->value = Value::none();
      else {
        e->kind = ExprKind::Name;
        e->name = t.value;
      }
      return e;
    }
    if (t.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += next().value;
      auto e = make(ExprKind::Const, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      auto e = make(ExprKind::Const, line);
      e->value = t.type == Tok::Int ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(ExprKind::List, line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    if (skip_op("{")) {
      auto e = make(ExprKind::Dict, line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    fail_here("expected an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        if (cur().type == Tok::Name) {
          auto e = make(ExprKind::GetAttr, line);
          e->name = next().value;
          e->args.push_back(std::move(node));
          node = std::move(e);
        } else if (cur().type == Tok::Int) {
          auto e = make(ExprKind::GetItem, line);
          auto key = make(ExprKind::Const, line);
          key->value = Value::integer(next().ival);
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(key));
          node = std::move(e);
        } else {
          fail_here("expected a name after '.'");
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const int line = next().line;  // '['
    std::vector<ExprPtr> items;
    bool tuple = false;
    while (!is_op("]")) {
      if (!items.empty()) {
        expect_op(",");
        tuple = true;
        if (is_op("]")) break;
      }
      items.push_back(parse_subscribed());
    }
    if (items.empty()) fail_here("expected a subscript");
    next();
    if (!tuple && items.size() == 1 && items[0]->kind == ExprKind::Slice) {
      items[0]->args.insert(items[0]->args.begin(), std::move(node));
      return std::move(items[0]);
    }
    auto e = make(ExprKind::GetItem, line);
    e->args.push_back(std::move(node));
    if (tuple || items.size() > 1) {
      auto t = make(ExprKind::Tuple, line);
      t->args = std::move(items);
      e->args.push_back(std::move(t));
    } else {
      e->args.push_back(std::move(items[0]));
    }
    return e;
  }

  // An index or a slice [start:stop:step] (the object is added by the caller).
  ExprPtr parse_subscribed() {
    const int line = cur().line;
    std::vector<ExprPtr> parts;
    if (skip_op(":")) {
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!skip_op(":")) return e;
      parts.push_back(std::move(e));
    }
    if (is_op(":") || is_op("]") || is_op(",")) parts.push_back(nullptr);
    else parts.push_back(parse_expression(true));
    if (skip_op(":")) {
      if (is_op("]") || is_op(",")) parts.push_back(nullptr);
      else parts.push_back(parse_expression(true));
    } else {
      parts.push_back(nullptr);
    }
    auto s = make(ExprKind::Slice, line);
    s->args = std::move(parts);
    return s;
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (cur().type == Tok::Name && look().type == Tok::Op && look().value == "=") {
        std::string key = next().value;
        next();
        e->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail_at(cur(), "invalid syntax for function call expression: a positional argument follows a keyword argument");
        if (is_op("*")) fail_at(cur(), "*args and **kwargs in calls are not supported");
        e->args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::Call, cur().line);
    e->args.push_back(std::move(node));
    parse_call_args(e.get());
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  // `| name(args) | name ...`; with start_inline the first '|' is absent (a filter block).
  ExprPtr parse_filter(ExprPtr node, bool start_inline, bool strict = false) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Token at = cur();
      std::string name = expect_dotted_name();
      auto e = make(ExprKind::Filter, at.line);
      e->builtin = find_filter(name);
      if (!e->builtin) note_unknown(at, "No filter named '" + name + "'.", strict);
      e->name = std::move(name);
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(e.get());
      node = std::move(e);
    }
    return node;
  }

  // A filter's or test's name: jinja2 allows dots in it.
  std::string expect_dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && look().type == Tok::Name) {
      next();
      name += "." + next().value;
    }
    return name;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;  // 'is'
    const bool negated = skip_name("not");
    const Token at = cur();
    std::string name = expect_dotted_name();
    auto e = make(ExprKind::Test, line);
    e->builtin = find_test(name);
    if (!e->builtin) note_unknown(at, "No test named '" + name + "'.", false);
    e->name = std::move(name);
    e->args.push_back(std::move(node));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int || t.type == Tok::Float ||
                (t.type == Tok::Op && (t.value == "(" || t.value == "[" || t.value == "{"))) &&
               !(t.type == Tok::Name && (t.value == "else" || t.value == "or" || t.value == "and"))) {
      if (is_name("is")) fail_here("you cannot chain multiple tests with is");
      ExprPtr arg = parse_postfix(parse_primary());
      e->args.push_back(std::move(arg));
    }
    if (!negated) return e;
    auto n = make(ExprKind::Not, line);
    n->args.push_back(std::move(e));
    return n;
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  const std::string& name_;
  int depth_ = 0;
  int nodes_in_tag_ = 0;
  bool soft_ = false;
  std::vector<UnknownName> unknown_;
  int loop_depth_ = 0;
  std::vector<std::string> open_blocks_;
};

}  // namespace

std::shared_ptr<Program> parse_program(std::string_view source, std::string name) {
  auto program = std::make_shared<Program>();
  program->name = std::move(name);
  Parser parser(tokenize(source, program->name), program->name);
  program->body = parser.parse_all();
  return program;
}

}  // namespace e3::jinja::detail
