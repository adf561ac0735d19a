#include "core/named_enum.h"

#include <algorithm>
#include <cctype>

namespace e3 {
namespace {

// Optimal string alignment: insertions, deletions, substitutions and swaps of two neighbours
// ("bf61" for "bf16") each count one.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// Longer text is not a typo of a name, and comparing it would only cost time.
constexpr size_t kMaxGuessed = 32;

}  // namespace

std::string loose_name(std::string_view name) {
  std::string out;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c))) out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

std::optional<std::string_view> closest_name(std::string_view text, const std::vector<std::string_view>& names) {
  const std::string loose = loose_name(text);
  if (loose.empty() || loose.size() > kMaxGuessed) return std::nullopt;
  std::optional<std::string_view> best;
  size_t best_distance = SIZE_MAX;
  for (std::string_view name : names) {
    // Up to two edits count as a typo, fewer for short names: one per three letters.
    const std::string target = loose_name(name);
    const size_t d = edit_distance(loose, target);
    // In a name of three letters one edit is a third of it: only a slip after the first letter
    // counts ("mpii" for "mpi"), else "gpu" would be taken for "cpu" when "cuda" was meant.
    if (d > 0 && target.size() <= 3 && loose.front() != target.front()) continue;
    if (d <= std::min<size_t>(2, target.size() / 3) && d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  return best;
}

}  // namespace e3
