#include "jobs/stats_report.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace e3::jobs {
namespace {

// What a stored state is: its capture id, or the final state's norm.
std::string state_role(const io::StatsReport& r, size_t i) {
  if (i < r.layer_ids.size()) return fmt::format("id {}", r.layer_ids[i]);
  return r.final_norms[i - r.layer_ids.size()];
}

std::string shards_line(const io::StatsReport& r) {
  const std::string parts =
      r.part_count == 1 ? "" : fmt::format(" of the {} of {} parts present", r.parts, r.part_count);
  return fmt::format("{} of {} shards{} ({})", r.shards_listed, r.shards_planned, parts,
                     r.complete ? "run complete" : "run not complete: what is there so far");
}

// Bins [lowest non-empty, highest non-empty] of the length histogram.
std::pair<int, int> used_bins(const io::SampleStats& s) {
  int lo = io::kLengthBins, hi = -1;
  for (int b = 0; b < io::kLengthBins; ++b)
    if (s.length_bins[static_cast<size_t>(b)] != 0) {
      lo = std::min(lo, b);
      hi = b;
    }
  return {lo, hi};
}

std::string bin_label(int b) { return fmt::format("[{}, {})", uint64_t{1} << b, uint64_t{1} << (b + 1)); }

std::string xml_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 has no place for the other C0 controls, not even escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') out += "?";
        else out += c;
    }
  }
  return out;
}

}  // namespace

std::string stats_number(double v) { return fmt::format("{:.6g}", v); }

std::string stats_table(const io::StatsReport& r) {
  const io::SampleStats& s = r.samples;
  std::string out = fmt::format("stats {}: {}, {} samples, {} tokens, {} skipped; states stored as {}\n",
                                r.dir.string(), shards_line(r), s.samples, s.tokens, r.skipped, r.dtype);
  size_t name_width = 5;
  for (const std::string& n : r.state_names) name_width = std::max(name_width, n.size());
  out += fmt::format("{:<{}}  {:<10} {:>14} {:>12} {:>12} {:>10} {:>10} {:>10}\n", "state", name_width, "capture",
                     "elements", "rms", "absmax", "nan", "+inf", "-inf");
  for (size_t i = 0; i < r.states.size(); ++i) {
    const io::ValueStats& v = r.states[i];
    out += fmt::format("{:<{}}  {:<10} {:>14} {:>12} {:>12} {:>10} {:>10} {:>10}\n", r.state_names[i], name_width,
                       state_role(r, i), v.count, stats_number(v.rms()), stats_number(v.abs_max), v.nan, v.pos_inf,
                       v.neg_inf);
  }
  out += "rms and absmax are over the finite values; fp8 values are decoded (code x scale)\n";
  const double mean = s.samples == 0 ? 0.0 : static_cast<double>(s.tokens) / s.samples;
  out += fmt::format("samples: {}, tokens per sample: shortest {}, mean {}, longest {}\n", s.samples, s.min_tokens,
                     stats_number(mean), s.max_tokens);
  out += fmt::format("loss_mask: {} of {} tokens are 1 (masked fraction {}); {} samples have an all-zero mask\n",
                     s.masked, s.tokens, stats_number(s.masked_fraction()), s.all_zero_mask);
  const auto [lo, hi] = used_bins(s);
  if (hi < 0) return out;
  uint64_t most = 0;
  for (int b = lo; b <= hi; ++b) most = std::max(most, s.length_bins[static_cast<size_t>(b)]);
  out += "length histogram (tokens per sample):\n";
  for (int b = lo; b <= hi; ++b) {
    const uint64_t n = s.length_bins[static_cast<size_t>(b)];
    const size_t bar = n == 0 ? 0 : std::max<size_t>(1, static_cast<size_t>(n * 50 / most));
    out += fmt::format("  {:<22} {:>10}{}\n", bin_label(b), n, bar == 0 ? "" : "  " + std::string(bar, '#'));
  }
  return out;
}

std::string stats_svg(const io::StatsReport& r) {
  const io::SampleStats& s = r.samples;
  constexpr int kWidth = 960, kLabel = 250, kPlotLeft = 260, kPlotRight = 860, kRow = 40;
  constexpr int kPlot = kPlotRight - kPlotLeft;
  // The log axis of the state bars: whole decades around every positive value.
  double smallest = 0, largest = 0;
  for (const io::ValueStats& v : r.states)
    for (const double x : {v.rms(), v.abs_max})
      if (x > 0) {
        smallest = smallest == 0 ? x : std::min(smallest, x);
        largest = std::max(largest, x);
      }
  int lo_decade = -3, hi_decade = 0;
  if (largest > 0) {
    // Half a decade of room below the smallest value, so that its bar is seen.
    lo_decade = static_cast<int>(std::floor(std::log10(smallest) - 0.5));
    hi_decade = std::max(lo_decade + 1, static_cast<int>(std::ceil(std::log10(largest))));
  }
  const auto bar_width = [&](double x) {
    if (x <= 0) return 0.0;
    return std::clamp((std::log10(x) - lo_decade) / (hi_decade - lo_decade), 0.0, 1.0) * kPlot;
  };

  std::string body;
  int y = 30;
  body += fmt::format("<text x=\"10\" y=\"{}\" class=\"title\">{}</text>\n", y,
                      xml_escaped(fmt::format("eagle3_extract stats {}", r.dir.string())));
  y += 22;
  body += fmt::format("<text x=\"10\" y=\"{}\">{}</text>\n", y,
                      xml_escaped(fmt::format("{}, {} samples, {} tokens, {} skipped; stored as {}", shards_line(r),
                                              s.samples, s.tokens, r.skipped, r.dtype)));
  y += 36;
  body += fmt::format("<text x=\"10\" y=\"{}\" class=\"heading\">RMS (blue) and absolute maximum (orange) of each "
                      "stored state, over its finite values; log scale</text>\n",
                      y);
  y += 14;
  // The decades first, under the bars: a grid line and its label each.
  const int rows_bottom = y + 10 + static_cast<int>(r.states.size()) * kRow;
  for (int d = lo_decade; d <= hi_decade; ++d) {
    const double x = kPlotLeft + static_cast<double>(d - lo_decade) / (hi_decade - lo_decade) * kPlot;
    body += fmt::format("<line class=\"grid\" x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\"/>\n", x, y, x,
                        rows_bottom);
    body += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">1e{}</text>\n", x,
                        rows_bottom + 14, d);
  }
  y += 10;
  for (size_t i = 0; i < r.states.size(); ++i) {
    const io::ValueStats& v = r.states[i];
    const std::string name = xml_escaped(r.state_names[i]);
    const std::string role = xml_escaped(fmt::format("{} ({})", r.state_names[i], state_role(r, i)));
    body += fmt::format(
        "<g class=\"state\" data-name=\"{}\" data-elements=\"{}\" data-rms=\"{}\" data-absmax=\"{}\" data-nan=\"{}\" "
        "data-pos-inf=\"{}\" data-neg-inf=\"{}\">\n",
        name, v.count, stats_number(v.rms()), stats_number(v.abs_max), v.nan, v.pos_inf, v.neg_inf);
    body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLabel, y + 14, role);
    const std::string nonfinite =
        v.nan + v.pos_inf + v.neg_inf == 0
            ? std::string()
            : fmt::format(" ({} NaN, {} +Inf, {} -Inf)", v.nan, v.pos_inf, v.neg_inf);
    body += fmt::format(
        "<rect class=\"rms\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"14\"/><text x=\"{:.1f}\" y=\"{}\" "
        "class=\"value\">rms {}</text>\n",
        kPlotLeft, y, bar_width(v.rms()), kPlotLeft + bar_width(v.rms()) + 4, y + 11, stats_number(v.rms()));
    body += fmt::format(
        "<rect class=\"absmax\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"14\"/><text x=\"{:.1f}\" y=\"{}\" "
        "class=\"value\">absmax {}{}</text>\n",
        kPlotLeft, y + 16, bar_width(v.abs_max), kPlotLeft + bar_width(v.abs_max) + 4, y + 27,
        stats_number(v.abs_max), xml_escaped(nonfinite));
    body += "</g>\n";
    y += kRow;
  }
  y += 50;

  body += fmt::format("<text x=\"10\" y=\"{}\" class=\"heading\">Samples by length in tokens (power-of-two "
                      "bins)</text>\n",
                      y);
  y += 20;
  const auto [lo, hi] = used_bins(s);
  constexpr int kHistHeight = 200;
  if (hi >= 0) {
    uint64_t most = 0;
    for (int b = lo; b <= hi; ++b) most = std::max(most, s.length_bins[static_cast<size_t>(b)]);
    const int bins = hi - lo + 1;
    const double slot = std::min(80.0, static_cast<double>(kWidth - 80) / bins);
    const int base = y + kHistHeight;
    for (int b = lo; b <= hi; ++b) {
      const uint64_t n = s.length_bins[static_cast<size_t>(b)];
      const double h = static_cast<double>(n) / static_cast<double>(most) * kHistHeight;
      const double x = 40 + (b - lo) * slot;
      body += fmt::format(
          "<rect class=\"length-bin\" data-low=\"{}\" data-high=\"{}\" data-count=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" "
          "width=\"{:.1f}\" height=\"{:.1f}\"/>\n",
          uint64_t{1} << b, uint64_t{1} << (b + 1), n, x + 2, base - h, slot - 4, h);
      body += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" class=\"value\">{}</text>\n",
                          x + slot / 2, base - h - 4, n);
      body += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">{}</text>\n",
                          x + slot / 2, base + 14, uint64_t{1} << b);
    }
    body += fmt::format("<line class=\"grid\" x1=\"40\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\"/>\n", base,
                        40 + bins * slot, base);
    y = base + 30;
  }
  y += 30;

  body += fmt::format("<text x=\"10\" y=\"{}\" class=\"heading\">Masked fraction: loss_mask ones / tokens</text>\n",
                      y);
  y += 14;
  const double f = s.masked_fraction();
  body += fmt::format("<g id=\"masked\" data-masked-fraction=\"{}\" data-masked=\"{}\" data-tokens=\"{}\" "
                      "data-all-zero-mask=\"{}\">\n",
                      stats_number(f), s.masked, s.tokens, s.all_zero_mask);
  body += fmt::format("<rect class=\"unmasked\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"20\"/>\n", kPlotLeft, y, kPlot);
  body += fmt::format("<rect class=\"masked\" x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"20\"/>\n", kPlotLeft, y,
                      f * kPlot);
  body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} of {} tokens</text>\n", kLabel, y + 15, s.masked,
                      s.tokens);
  body += fmt::format("<text x=\"{}\" y=\"{}\" class=\"value\">{}</text>\n", kPlotRight + 6, y + 15, stats_number(f));
  y += 40;
  body += fmt::format("<text x=\"{}\" y=\"{}\">{} of {} samples have an all-zero loss_mask</text>\n", kPlotLeft, y,
                      s.all_zero_mask, s.samples);
  y += 20;
  body += "</g>\n";

  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<style>.title{{font-size:16px;font-weight:bold}} .heading{{font-weight:bold}} .value{{fill:#333}} "
      ".axis{{fill:#666;font-size:10px}} .grid{{stroke:#ccc}} .rms{{fill:#4878d0}} .absmax{{fill:#ee854a}} "
      ".length-bin{{fill:#6acc64}} .masked{{fill:#4878d0}} .unmasked{{fill:#ddd}}</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{2}</svg>\n",
      kWidth, y + 10, body);
}

std::string stats_json(const io::StatsReport& r) {
  using nlohmann::json;
  json states = json::array();
  for (size_t i = 0; i < r.states.size(); ++i) {
    const io::ValueStats& v = r.states[i];
    json e = {{"name", r.state_names[i]},
              {"elements", v.count},
              {"finite", v.finite()},
              {"rms", v.rms()},
              {"abs_max", v.abs_max},
              {"nan", v.nan},
              {"pos_inf", v.pos_inf},
              {"neg_inf", v.neg_inf}};
    if (i < r.layer_ids.size())
      e["capture_id"] = r.layer_ids[i];
    else
      e["norm"] = r.final_norms[i - r.layer_ids.size()];
    states.push_back(std::move(e));
  }
  const io::SampleStats& s = r.samples;
  json bins = json::array();
  const auto [lo, hi] = used_bins(s);
  for (int b = lo; b <= hi; ++b)
    bins.push_back({{"low", uint64_t{1} << b}, {"high", uint64_t{1} << (b + 1)}, {"count", s.length_bins[static_cast<size_t>(b)]}});
  const json doc = {{"dir", r.dir.string()},
                    {"dtype", r.dtype},
                    {"shards_read", r.shards_listed},
                    {"shards_planned", r.shards_planned},
                    {"parts", r.parts},
                    {"part_count", r.part_count},
                    {"complete", r.complete},
                    {"input_samples", r.num_samples},
                    {"skipped", r.skipped},
                    {"states", states},
                    {"samples",
                     {{"count", s.samples},
                      {"tokens", s.tokens},
                      {"min_tokens", s.min_tokens},
                      {"max_tokens", s.max_tokens},
                      {"masked", s.masked},
                      {"masked_fraction", s.masked_fraction()},
                      {"all_zero_mask", s.all_zero_mask},
                      {"length_histogram", bins}}}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace e3::jobs
