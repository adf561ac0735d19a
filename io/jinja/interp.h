// The evaluator's state during one render: scopes, the output being written, the limits, and the
// operations on values that both the evaluator and the builtins (filters, tests, methods) use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/jinja/ast.h"
#include "io/jinja/template.h"

namespace e3::jinja::detail {

// A scope: the context at the root, each for-loop iteration, each macro call, each with block.
// Names point into the parsed template or the caller's context, both alive for the render.
struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string_view, Value>> vars;
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value v);
};

struct LoopObj;

class Interp {
 public:
  Interp(const Program& program, const RenderOptions& options);
  // Empties the namespaces still alive: a namespace can hold itself (ns.me = ns), a cycle that
  // reference counting alone would never free.
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  Rendered run(std::shared_ptr<Frame> root);

  // ---- shared with the builtins
  const RenderOptions& options() const { return options_; }
  // Counts work against max_steps: a loop iteration or call is one step, walking or copying a
  // sequence one step per item (or per kBytesPerStep bytes of a string), so that a template's
  // running time is bounded whatever it loops over.
  void step(uint64_t n = 1) const;
  static constexpr size_t kBytesPerStep = 256;
  // Refuses a string or output that would exceed max_output_bytes.
  void check_size(size_t bytes) const;
  // Remembers a namespace made during the render, for the destructor.
  void adopt_namespace(const Value& ns);
  // Refuses recursion past the stack budget (deep templates, recursive macros and loops).
  void check_stack() const;
  Value call(const Value& callee, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  // What `for x in v` walks: a str's characters (with their tags), a dict's keys, a list's items.
  std::vector<Value> iterate(const Value& v) const;
  Value apply_filter(const std::string& name, const Value& target, CallArgs& args);
  bool apply_test(const std::string& name, const Value& target, CallArgs& args);
  Value call_method(const Value& obj, const std::string& name, CallArgs& args);
  // Python's + - * / // % ** on values.
  Value binary(BinOp op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item) const;
  Value run_loop_again(const LoopObj& loop, const Value& iterable);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const std::shared_ptr<Frame>& frame);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Frame>& frame);
  void exec_for(const Stmt& s, const std::shared_ptr<Frame>& frame, const Value& iterable, int depth0);
  Value eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value eval_call(const Expr& e, const std::shared_ptr<Frame>& frame);
  Value eval_filter(const Expr& e, const std::shared_ptr<Frame>& frame, const Value* input);
  Value eval_slice(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs eval_args(const Expr& e, const std::shared_ptr<Frame>& frame, size_t first);
  Value lookup(const std::string& name, const Frame& frame) const;
  Value capture(const Body& body, const std::shared_ptr<Frame>& frame);
  Value make_macro(const std::shared_ptr<MacroDef>& m, const std::shared_ptr<Frame>& frame);
  Value call_macro(const MacroDef& m, const std::weak_ptr<Frame>& scope, CallArgs& args, const Value* caller);
  void assign(Frame& frame, const Stmt& s, const Value& v);
  void write(const Value& v);

  const Program& program_;
  const RenderOptions& options_;
  Text* out_ = nullptr;
  Text root_out_;
  std::vector<std::pair<size_t, size_t>> generation_;
  mutable uint64_t steps_ = 0;
  int call_depth_ = 0;
  uintptr_t stack_base_ = 0;  // the frame address where run() began
  std::vector<std::weak_ptr<const Heap>> namespaces_;
  size_t namespaces_pruned_at_ = 512;
  int line_ = 0;
  friend struct LoopAccess;
};

struct LoopObj final : Heap {
  std::shared_ptr<const std::vector<Value>> items;
  int64_t index0 = 0;
  int depth0 = 0;
  mutable std::vector<Value> last_changed;
  mutable bool changed_seen = false;
  const Stmt* loop = nullptr;  // for loop(...) of a recursive loop
  std::weak_ptr<Frame> scope;
};

// The template globals: range, dict, namespace, raise_exception, strftime_now, cycler, joiner.
const std::vector<std::pair<std::string, Value>>& globals();

// Python's str(v) unless v is undefined (jinja2's soft_str: undefined writes nothing).
inline Text str_of(const Value& v) { return to_text(v); }

}  // namespace e3::jinja::detail
