// What `eagle3_extract stats` shows of a combined io::StatsReport: the table it prints, the SVG
// drawing of the same figures, and the JSON form. None of them holds a time or a thread count,
// so the same directory gives the same bytes however it was read.
#pragma once

#include <string>

#include "io/shard_stats.h"

namespace e3::jobs {

// A value as the table, the SVG and the tests print it: 6 significant digits.
std::string stats_number(double v);

// The readable table: the shards read, one line per stored state, then the samples and the
// length histogram.
std::string stats_table(const io::StatsReport& r);

// A self-contained SVG document: per-state bars of RMS and absolute maximum (log scale), the
// length histogram, and the masked fraction. Each figure's element carries its numbers in
// data-* attributes, formatted as in the table.
std::string stats_svg(const io::StatsReport& r);

// The same figures, machine-readable (numbers at full precision).
std::string stats_json(const io::StatsReport& r);

}  // namespace e3::jobs
