// Walks the parsed template over the context: jinja2's scoping (a fresh scope per loop iteration
// and per macro call, `if` shares its scope), Undefined, loops and macros, and the output with
// its provenance.
#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "core/error.h"
#include "io/jinja/interp.h"

namespace e3::jinja::detail {

namespace {

// Macro calls and recursive loops nest at most this deep: a template recursing without end gets
// an error, never a stack overflow.
constexpr int kMaxCallDepth = 100;
// The evaluator recurses on the template's tree and on macro calls; past this much stack a render
// ends with an error, whatever the mix of nesting and recursion, long before a thread's stack
// (8 MiB by default) runs out.
constexpr uintptr_t kStackBudget = uintptr_t{2} << 20;

uintptr_t frame_address() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }

struct Restore {
  Text*& slot;
  Text* saved;
  ~Restore() { slot = saved; }
};

struct DepthGuard {
  int& depth;
  ~DepthGuard() { --depth; }
};

}  // namespace

const Value* Frame::find(std::string_view name) const {
  for (auto it = vars.rbegin(); it != vars.rend(); ++it)
    if (it->first == name) return &it->second;
  return nullptr;
}

void Frame::set(std::string_view name, Value v) {
  for (auto& [k, x] : vars) {
    if (k == name) {
      x = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

Interp::Interp(const Program& program, const RenderOptions& options) : program_(program), options_(options) {}

Interp::~Interp() {
  for (const auto& weak : namespaces_) {
    if (auto ns = weak.lock()) {
      auto attrs = std::move(static_cast<const NsObj&>(*ns).attrs);
      static_cast<const NsObj&>(*ns).attrs.clear();
    }  // the attributes die here, and with them any cycle through this namespace
  }
}

void Interp::adopt_namespace(const Value& ns) {
  step();
  // Forget the namespaces already freed whenever the list doubles: it stays as long as the live
  // ones, however many a loop makes and drops.
  if (namespaces_.size() >= namespaces_pruned_at_ * 2) {
    std::erase_if(namespaces_, [](const std::weak_ptr<const Heap>& w) { return w.expired(); });
    namespaces_pruned_at_ = std::max<size_t>(namespaces_.size(), 512);
  }
  namespaces_.push_back(ns.heap);
}

void Interp::step(uint64_t n) const {
  steps_ += n;
  if (steps_ > options_.max_steps)
    throw JinjaError("the template ran more than " + std::to_string(options_.max_steps) +
                     " steps (loop iterations, calls, items walked or copied); a template this busy is refused");
}

void Interp::check_stack() const {
  const uintptr_t here = frame_address();
  if (here < stack_base_ && stack_base_ - here > kStackBudget)
    throw JinjaError("the template nests or recurses too deeply (more than " + std::to_string(kStackBudget >> 20) +
                     " MiB of stack)");
}

void Interp::check_size(size_t bytes) const {
  if (bytes > options_.max_output_bytes)
    throw JinjaError("the rendered text would exceed " + std::to_string(options_.max_output_bytes) + " bytes");
}

Rendered Interp::run(std::shared_ptr<Frame> root) {
  out_ = &root_out_;
  stack_base_ = frame_address();
  try {
    exec(program_.body, root);
  } catch (const JinjaError& e) {
    E3_THROW(ErrorKind::Input, "{}:{}: {}", printable(program_.name), line_, printable(e.what()));
  }
  Rendered r;
  r.text = root_out_.str();
  r.origins.reserve(root_out_.runs().size());
  for (const auto& run : root_out_.runs()) r.origins.push_back({run.begin, run.end, run.tag});
  r.generation = std::move(generation_);
  return r;
}

Interp::Flow Interp::exec(const Body& body, const std::shared_ptr<Frame>& frame) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, frame);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

void Interp::write(const Value& v) {
  append_str(*out_, v);
  check_size(out_->size());
}

Value Interp::capture(const Body& body, const std::shared_ptr<Frame>& frame) {
  Text buffer;
  {
    Restore restore{out_, out_};
    out_ = &buffer;
    exec(body, frame);
  }
  return Value::string(std::move(buffer));
}

void Interp::assign(Frame& frame, const Stmt& s, const Value& v) {
  if (!s.tuple_target) {
    frame.set(s.targets[0], v);
    return;
  }
  std::vector<Value> parts = iterate(v);
  if (parts.size() != s.targets.size()) {
    if (parts.size() > s.targets.size())
      throw JinjaError("too many values to unpack (expected " + std::to_string(s.targets.size()) + ")");
    throw JinjaError("not enough values to unpack (expected " + std::to_string(s.targets.size()) + ", got " +
                     std::to_string(parts.size()) + ")");
  }
  for (size_t k = 0; k < parts.size(); ++k) frame.set(s.targets[k], std::move(parts[k]));
}

Interp::Flow Interp::exec_stmt(const Stmt& s, const std::shared_ptr<Frame>& frame) {
  line_ = s.line;
  check_stack();
  switch (s.kind) {
    case StmtKind::Data:
      out_->append(s.data.text());
      check_size(out_->size());
      return Flow::Normal;
    case StmtKind::Print: {
      const Value v = eval(*s.expr, frame);
      write(v);
      return Flow::Normal;
    }
    case StmtKind::If:
      for (const auto& [test, body] : s.branches) {
        if (truthy(eval(*test, frame))) return exec(body, frame);
      }
      return exec(s.else_body, frame);
    case StmtKind::For: {
      const Value iterable = eval(*s.expr, frame);
      exec_for(s, frame, iterable, 0);
      return Flow::Normal;
    }
    case StmtKind::Set: assign(*frame, s, eval(*s.expr, frame)); return Flow::Normal;
    case StmtKind::SetAttr: {
      const Value ns = lookup(s.targets[0], *frame);
      Value v = eval(*s.expr, frame);
      line_ = s.line;
      if (ns.kind != Kind::Namespace) throw JinjaError("cannot assign attribute on non-namespace object");
      auto& attrs = static_cast<const NsObj&>(*ns.heap).attrs;
      for (auto& [k, x] : attrs) {
        if (k == s.targets[1]) {
          x = std::move(v);
          return Flow::Normal;
        }
      }
      attrs.emplace_back(s.targets[1], std::move(v));
      return Flow::Normal;
    }
    case StmtKind::SetBlock: {
      Value v = capture(s.body, frame);
      if (s.filter) v = eval_filter(*s.filter, frame, &v);
      frame->set(s.targets[0], std::move(v));
      return Flow::Normal;
    }
    case StmtKind::Macro: frame->set(s.macro->name, make_macro(s.macro, frame)); return Flow::Normal;
    case StmtKind::CallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.args[0], frame);
      CallArgs args = eval_args(call, frame, 1);
      args.kw.emplace_back("caller", make_macro(s.macro, frame));
      line_ = s.line;
      write(this->call(callee, args));
      return Flow::Normal;
    }
    case StmtKind::FilterBlock: {
      const Value body = capture(s.body, frame);
      write(eval_filter(*s.filter, frame, &body));
      return Flow::Normal;
    }
    case StmtKind::Break: return Flow::Break;
    case StmtKind::Continue: return Flow::Continue;
    case StmtKind::Generation: {
      const size_t begin = out_->size();
      const Flow f = exec(s.body, frame);
      // Spans are positions in the final text: a block rendered into a macro's or set block's
      // buffer has none there.
      if (out_ == &root_out_) generation_.emplace_back(begin, out_->size());
      return f;
    }
    case StmtKind::With: {
      auto inner = std::make_shared<Frame>();
      inner->parent = frame;
      for (const auto& [name, expr] : s.assigns) inner->set(name, eval(*expr, frame));
      return exec(s.body, inner);
    }
  }
  return Flow::Normal;
}

struct LoopAccess {};

void Interp::exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, const Value& iterable, int depth0) {
  auto all = std::make_shared<std::vector<Value>>(iterate(iterable));
  if (s.cond) {
    std::vector<Value> kept;
    for (auto& item : *all) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      assign(*f, s, item);
      if (truthy(eval(*s.cond, f))) kept.push_back(std::move(item));
    }
    *all = std::move(kept);
  }
  if (all->empty()) {
    exec(s.else_body, frame);
    return;
  }
  auto loop = std::make_shared<LoopObj>();
  loop->items = all;
  loop->depth0 = depth0;
  loop->loop = &s;
  loop->scope = frame;
  Value loop_value;
  loop_value.kind = Kind::Loop;
  loop_value.heap = loop;
  for (size_t k = 0; k < all->size(); ++k) {
    step();
    loop->index0 = static_cast<int64_t>(k);
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    f->vars.reserve(4);
    assign(*f, s, (*all)[k]);
    f->set("loop", loop_value);
    const Flow flow = exec(s.body, f);
    line_ = s.line;
    if (flow == Flow::Break) break;
  }
}

Value Interp::run_loop_again(const LoopObj& loop, const Value& iterable) {
  if (!loop.loop || !loop.loop->recursive) throw JinjaError("Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
  auto scope = loop.scope.lock();
  if (!scope) throw JinjaError("the loop was called after it ended");
  if (++call_depth_ > kMaxCallDepth) {
    --call_depth_;
    throw JinjaError("maximum recursion depth exceeded: calls nest deeper than " + std::to_string(kMaxCallDepth));
  }
  DepthGuard guard{call_depth_};
  Text buffer;
  {
    Restore restore{out_, out_};
    out_ = &buffer;
    exec_for(*loop.loop, scope, iterable, loop.depth0 + 1);
  }
  return Value::string(std::move(buffer));
}

Value Interp::make_macro(const std::shared_ptr<MacroDef>& m, const std::shared_ptr<Frame>& frame) {
  std::weak_ptr<Frame> scope = frame;  // weak: a macro stored in its own scope must not keep it alive
  return make_function(m->name, [m, scope](Interp& in, CallArgs& args) { return in.call_macro(*m, scope, args, nullptr); });
}

Value Interp::call_macro(const MacroDef& m, const std::weak_ptr<Frame>& scope, CallArgs& args, const Value*) {
  step();
  if (++call_depth_ > kMaxCallDepth) {
    --call_depth_;
    throw JinjaError("maximum recursion depth exceeded: macro calls nest deeper than " + std::to_string(kMaxCallDepth));
  }
  DepthGuard guard{call_depth_};
  auto parent = scope.lock();
  if (!parent) throw JinjaError("macro '" + m.name + "' was called after its scope ended");
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  const size_t n = m.params.size();
  if (args.pos.size() > n && !m.uses_varargs)
    throw JinjaError("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
  std::vector<const Value*> bound(n, nullptr);
  for (size_t k = 0; k < n && k < args.pos.size(); ++k) bound[k] = &args.pos[k];
  std::vector<std::pair<Value, Value>> extra_kw;
  Value caller;
  bool has_caller = false;
  for (const auto& [key, v] : args.kw) {
    if (key == "caller") {
      caller = v;
      has_caller = true;
      continue;
    }
    size_t k = 0;
    while (k < n && m.params[k] != key) ++k;
    if (k < n) {
      if (bound[k]) throw JinjaError("macro '" + m.name + "' got multiple values for argument '" + key + "'");
      bound[k] = &v;
    } else if (m.uses_kwargs) {
      extra_kw.emplace_back(Value::string(key), v);
    } else {
      throw JinjaError("macro '" + m.name + "' takes no keyword argument '" + key + "'");
    }
  }
  for (size_t k = 0; k < n; ++k) {
    if (bound[k]) f->set(m.params[k], *bound[k]);
    else if (m.defaults[k]) f->set(m.params[k], eval(*m.defaults[k], f));
    else f->set(m.params[k], Value::undefined("parameter '" + m.params[k] + "' was not provided"));
  }
  if (m.uses_varargs) {
    std::vector<Value> rest;
    for (size_t k = n; k < args.pos.size(); ++k) rest.push_back(args.pos[k]);
    f->set("varargs", Value::list(std::move(rest), true));
  }
  if (m.uses_kwargs) f->set("kwargs", Value::dict(std::move(extra_kw)));
  if (has_caller) f->set("caller", caller);
  else if (m.uses_caller) f->set("caller", Value::undefined("No caller defined"));
  const int saved_line = line_;
  Value out = capture(m.body, f);
  line_ = saved_line;
  return out;
}

Value Interp::lookup(const std::string& name, const Frame& frame) const {
  for (const Frame* f = &frame; f; f = f->parent.get()) {
    if (const Value* v = f->find(name)) return *v;
  }
  for (const auto& [k, v] : globals())
    if (k == name) return v;
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Interp::eval_args(const Expr& e, const std::shared_ptr<Frame>& frame, size_t first) {
  CallArgs args;
  args.pos.reserve(e.args.size() - first);
  for (size_t k = first; k < e.args.size(); ++k) args.pos.push_back(eval(*e.args[k], frame));
  for (const auto& [key, x] : e.kwargs) args.kw.emplace_back(key, eval(*x, frame));
  return args;
}

Value Interp::call(const Value& callee, CallArgs& args) {
  switch (callee.kind) {
    case Kind::Callable: {
      const auto& f = static_cast<const FnObj&>(*callee.heap);
      return f.method.empty() ? f.fn(*this, args) : call_method(f.self, f.method, args);
    }
    case Kind::Loop: {
      if (args.pos.size() != 1) throw JinjaError("loop() takes exactly one argument");
      return run_loop_again(static_cast<const LoopObj&>(*callee.heap), args.pos[0]);
    }
    case Kind::Undefined: fail_undefined(callee);
    default: throw JinjaError("'" + type_name(callee) + "' object is not callable");
  }
}

Value Interp::eval_call(const Expr& e, const std::shared_ptr<Frame>& frame) {
  const Expr& callee = *e.args[0];
  if (callee.kind == ExprKind::GetAttr) {
    const Value obj = eval(*callee.args[0], frame);
    line_ = callee.line;
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.kind == Kind::Str || obj.kind == Kind::List || obj.kind == Kind::Dict) {
      CallArgs args = eval_args(e, frame, 1);
      line_ = e.line;
      return call_method(obj, callee.name, args);
    }
    const Value fn = getattr(obj, callee.name);
    CallArgs args = eval_args(e, frame, 1);
    line_ = e.line;
    return call(fn, args);
  }
  const Value fn = eval(callee, frame);
  CallArgs args = eval_args(e, frame, 1);
  line_ = e.line;
  return call(fn, args);
}

Value Interp::eval_filter(const Expr& e, const std::shared_ptr<Frame>& frame, const Value* input) {
  // A filter block's or set block's chain (`| trim | upper`) ends in the block's text: `input`
  // goes down the chain to the innermost filter, whose target is null.
  Value target;
  if (!e.args[0]) target = input ? *input : Value();
  else if (input && e.args[0]->kind == ExprKind::Filter) target = eval_filter(*e.args[0], frame, input);
  else target = eval(*e.args[0], frame);
  CallArgs args = eval_args(e, frame, 1);
  line_ = e.line;
  if (!e.builtin) throw JinjaError("No filter named '" + e.name + "' found.");
  return e.builtin(*this, target, args);
}

namespace {

bool is_index(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }

// Python's slice.indices(n): the positions a[start:stop:step] visits.
std::vector<int64_t> slice_positions(int64_t n, const Value& start, const Value& stop, const Value& step) {
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !is_index(*v)) throw JinjaError("slice indices must be integers or None or have an __index__ method");
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) throw JinjaError("slice step cannot be zero");
  auto adjust = [&](const Value& v, int64_t def_pos, int64_t def_neg) {
    if (v.is_none()) return st > 0 ? def_pos : def_neg;
    int64_t x = v.as_int();
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t b = adjust(start, 0, n - 1), e = adjust(stop, n, -1);
  std::vector<int64_t> out;
  if (st > 0)
    for (int64_t k = b; k < e; k += st) out.push_back(k);
  else
    for (int64_t k = b; k > e; k += st) out.push_back(k);
  return out;
}

}  // namespace

Value Interp::eval_slice(const Expr& e, const std::shared_ptr<Frame>& frame) {
  const Value obj = eval(*e.args[0], frame);
  Value parts[3];
  for (int k = 0; k < 3; ++k) parts[k] = e.args[k + 1] ? eval(*e.args[k + 1], frame) : Value::none();
  line_ = e.line;
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.kind == Kind::Str) {
    const Text& t = obj.text();
    const auto offsets = code_point_offsets(t.str());
    const auto pos = slice_positions(static_cast<int64_t>(offsets.size() - 1), parts[0], parts[1], parts[2]);
    Text out;
    // Runs of consecutive code points are copied at once.
    for (size_t k = 0; k < pos.size();) {
      size_t j = k;
      if (!parts[2].is_none() && parts[2].as_int() != 1) {
        out.append(t, offsets[pos[k]], offsets[pos[k] + 1]);
        ++k;
        continue;
      }
      j = pos.size() - 1;
      out.append(t, offsets[pos[k]], offsets[pos[j] + 1]);
      k = j + 1;
    }
    return Value::string(std::move(out));
  }
  if (obj.kind == Kind::List) {
    const auto& items = obj.items();
    std::vector<Value> out;
    for (int64_t p : slice_positions(static_cast<int64_t>(items.size()), parts[0], parts[1], parts[2]))
      out.push_back(items[p]);
    return Value::list(std::move(out), obj.is_tuple());
  }
  throw JinjaError("'" + type_name(obj) + "' object is not subscriptable");
}

Value Interp::getitem(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::Dict:
      if (const Value* v = dict_find(obj, key)) return *v;
      break;
    case Kind::List:
      if (is_index(key)) {
        const auto& items = obj.items();
        int64_t k = key.as_int();
        if (k < 0) k += static_cast<int64_t>(items.size());
        if (k >= 0 && k < static_cast<int64_t>(items.size())) return items[k];
      }
      break;
    case Kind::Str:
      if (is_index(key)) {
        const auto offsets = code_point_offsets(obj.str());
        const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
        int64_t k = key.as_int();
        if (k < 0) k += n;
        if (k >= 0 && k < n) return Value::string(obj.text().slice(offsets[k], offsets[k + 1]));
      }
      break;
    default: break;
  }
  if (key.kind == Kind::Str) return getattr(obj, key.str());
  Text k;
  append_repr(k, key);
  return Value::undefined(object_repr(obj) + " has no element " + k.str());
}

std::vector<Value> Interp::iterate(const Value& v) const {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: step(v.items().size()); return v.items();
    case Kind::Dict: {
      step(v.entries().size());
      std::vector<Value> keys;
      keys.reserve(v.entries().size());
      for (const auto& [k, x] : v.entries()) keys.push_back(k);
      return keys;
    }
    case Kind::Str: {
      std::vector<Value> chars;
      const auto offsets = code_point_offsets(v.str());
      step(offsets.size());
      chars.reserve(offsets.size());
      for (size_t k = 0; k + 1 < offsets.size(); ++k) chars.push_back(Value::string(v.text().slice(offsets[k], offsets[k + 1])));
      return chars;
    }
    default: throw JinjaError("'" + type_name(v) + "' object is not iterable");
  }
}

bool Interp::contains(const Value& c, const Value& item) const {
  switch (c.kind) {
    case Kind::Undefined: return false;
    case Kind::Str:
      if (item.is_undefined()) fail_undefined(item);
      if (item.kind != Kind::Str)
        throw JinjaError("'in <string>' requires string as left operand, not " + type_name(item));
      step(c.str().size() / kBytesPerStep);
      return c.str().find(item.str()) != std::string::npos;
    case Kind::List:
      step(c.items().size());
      for (const auto& x : c.items())
        if (equals(x, item)) return true;
      return false;
    case Kind::Dict: step(c.entries().size()); return dict_find(c, item) != nullptr;
    default: throw JinjaError("argument of type '" + type_name(c) + "' is not iterable");
  }
}

Value Interp::eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  check_stack();
  switch (e.kind) {
    case ExprKind::Const: return e.value;
    case ExprKind::Name: return lookup(e.name, *frame);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, frame));
      return Value::list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      std::vector<std::pair<Value, Value>> items;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], frame);
        Value v = eval(*e.args[k + 1], frame);
        bool replaced = false;
        for (auto& [ek, ev] : items) {
          if (equals(ek, key)) {
            ev = v;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(std::move(key), std::move(v));
      }
      return Value::dict(std::move(items));
    }
    case ExprKind::Neg:
    case ExprKind::Pos: {
      const Value v = eval(*e.args[0], frame);
      line_ = e.line;
      if (v.is_undefined()) fail_undefined(v);
      const bool neg = e.kind == ExprKind::Neg;
      if (v.kind == Kind::Float) return Value::number(neg ? -v.f : v.f);
      if (v.is_int_like()) {
        if (neg && v.as_int() == INT64_MIN) throw JinjaError("integer overflow: the result does not fit in 64 bits");
        return Value::integer(neg ? -v.as_int() : v.as_int());
      }
      throw JinjaError(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + type_name(v) + "'");
    }
    case ExprKind::Not: return Value::boolean(!truthy(eval(*e.args[0], frame)));
    case ExprKind::Bin: {
      const Value a = eval(*e.args[0], frame);
      const Value b = eval(*e.args[1], frame);
      line_ = e.line;
      return binary(e.op, a, b);
    }
    case ExprKind::And: {
      Value a = eval(*e.args[0], frame);
      return truthy(a) ? eval(*e.args[1], frame) : a;
    }
    case ExprKind::Or: {
      Value a = eval(*e.args[0], frame);
      return truthy(a) ? a : eval(*e.args[1], frame);
    }
    case ExprKind::Compare: {
      Value left = eval(*e.args[0], frame);
      for (size_t k = 0; k < e.cmp.size(); ++k) {
        Value right = eval(*e.args[k + 1], frame);
        line_ = e.line;
        bool ok = false;
        switch (e.cmp[k]) {
          case CmpOp::Eq: ok = equals(left, right); break;
          case CmpOp::Ne: ok = !equals(left, right); break;
          case CmpOp::Lt: ok = compare(left, right, "<") < 0; break;
          case CmpOp::Le: ok = compare(left, right, "<=") <= 0; break;
          case CmpOp::Gt: ok = compare(left, right, ">") > 0; break;
          case CmpOp::Ge: ok = compare(left, right, ">=") >= 0; break;
          case CmpOp::In: ok = contains(right, left); break;
          case CmpOp::NotIn: ok = !contains(right, left); break;
        }
        if (!ok) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::GetAttr: {
      const Value obj = eval(*e.args[0], frame);
      line_ = e.line;
      return getattr(obj, e.name);
    }
    case ExprKind::GetItem: {
      const Value obj = eval(*e.args[0], frame);
      const Value key = eval(*e.args[1], frame);
      line_ = e.line;
      return getitem(obj, key);
    }
    case ExprKind::Slice: return eval_slice(e, frame);
    case ExprKind::Call: return eval_call(e, frame);
    case ExprKind::Filter: return eval_filter(e, frame, nullptr);
    case ExprKind::Test: {
      const Value target = eval(*e.args[0], frame);
      CallArgs args = eval_args(e, frame, 1);
      line_ = e.line;
      if (!e.builtin) throw JinjaError("No test named '" + e.name + "' found.");
      return e.builtin(*this, target, args);
    }
    case ExprKind::Cond: {
      if (truthy(eval(*e.args[0], frame))) return eval(*e.args[1], frame);
      if (e.args[2]) return eval(*e.args[2], frame);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Value();
}

Value Interp::apply_filter(const std::string& name, const Value& target, CallArgs& args) {
  const Builtin f = find_filter(name);
  if (!f) throw JinjaError("No filter named '" + name + "'.");
  return f(*this, target, args);
}

bool Interp::apply_test(const std::string& name, const Value& target, CallArgs& args) {
  const Builtin t = find_test(name);
  if (!t) throw JinjaError("No test named '" + name + "'.");
  return truthy(t(*this, target, args));
}

// ---- the context

namespace {

using TagMap = std::unordered_map<const nlohmann::ordered_json*, int32_t>;

constexpr int kMaxContextDepth = 128;

Value from_json(const nlohmann::ordered_json& j, const TagMap& tags, int32_t tag, int depth) {
  if (depth > kMaxContextDepth) throw JinjaError("the context nests deeper than " + std::to_string(kMaxContextDepth) + " levels");
  if (!tags.empty()) {
    auto it = tags.find(&j);
    if (it != tags.end()) tag = it->second;
  }
  Value v;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: v = Value::none(); break;
    case nlohmann::ordered_json::value_t::boolean: v = Value::boolean(j.get<bool>()); break;
    case nlohmann::ordered_json::value_t::number_integer: v = Value::integer(j.get<int64_t>()); break;
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      v = u > static_cast<uint64_t>(INT64_MAX) ? Value::number(static_cast<double>(u)) : Value::integer(static_cast<int64_t>(u));
      break;
    }
    case nlohmann::ordered_json::value_t::number_float: v = Value::number(j.get<double>()); break;
    case nlohmann::ordered_json::value_t::string: v = Value::string(Text(j.get_ref<const std::string&>(), tag)); break;
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, tags, tag, depth + 1));
      v = Value::list(std::move(items));
      break;
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(Value::string(Text(it.key(), tag)), from_json(it.value(), tags, tag, depth + 1));
      v = Value::dict(std::move(items));
      break;
    }
    default: throw JinjaError("the context holds a value of a kind JSON text cannot have");
  }
  v.tag = tag;
  return v;
}

}  // namespace

}  // namespace e3::jinja::detail

namespace e3::jinja {

Template Template::parse(std::string_view source, std::string name) {
  return Template(detail::parse_program(source, std::move(name)));
}

const std::string& Template::name() const { return program_->name; }

Rendered Template::render(const nlohmann::ordered_json& context,
                          const std::vector<std::pair<std::string, int32_t>>& tags,
                          const RenderOptions& options) const {
  using namespace detail;
  E3_REQUIRE(context.is_object(), ErrorKind::Internal, "{}: the context of a render must be a JSON object",
             program_->name);
  TagMap map;
  for (const auto& [pointer, tag] : tags) {
    nlohmann::ordered_json::json_pointer p;
    try {
      p = nlohmann::ordered_json::json_pointer(pointer);
    } catch (const std::exception& e) {
      E3_THROW(ErrorKind::Internal, "{}: bad JSON pointer '{}' for tag {}: {}", program_->name, pointer, tag, e.what());
    }
    if (context.contains(p)) map[&context.at(p)] = tag;
  }
  auto root = std::make_shared<Frame>();
  Interp interp(*program_, options);
  try {
    root->vars.reserve(context.size());
    for (auto it = context.begin(); it != context.end(); ++it)
      root->vars.emplace_back(it.key(), from_json(it.value(), map, 0, 0));
  } catch (const JinjaError& e) {
    E3_THROW(ErrorKind::Input, "{}: {}", printable(program_->name), printable(e.what()));
  }
  return interp.run(root);
}

}  // namespace e3::jinja
