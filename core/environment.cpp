#include "core/environment.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "core/error.h"

namespace e3 {
namespace {

void require_known(const std::string& name) {
  E3_REQUIRE(std::find(std::begin(Environment::kVariables), std::end(Environment::kVariables), name) !=
                 std::end(Environment::kVariables),
             ErrorKind::Internal, "the environment variable {} is not among those read at start-up (core/environment.h)",
             name);
}

}  // namespace

Environment::Environment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {
  for (const auto& [name, value] : vars_) require_known(name);
}

Environment Environment::of_process() {
  std::map<std::string, std::string> vars;
  for (const char* name : kVariables)
    if (const char* value = std::getenv(name)) vars.emplace(name, value);
  return Environment(std::move(vars));
}

std::optional<std::string> Environment::get(const std::string& name) const {
  require_known(name);
  const auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

}  // namespace e3
