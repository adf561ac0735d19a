// What export says of each trainer's defaults: the samples its default length would cut, and
// ModelOpt's order of the aux states (ascending layer ids, whatever the --layers order).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "jobs/export.h"

using e3::jobs::ExportFormat;
using e3::jobs::exported_capture_order;
using e3::jobs::length_message;
using e3::jobs::length_report;

TEST(ExportLengths, EachTrainersDefault) {
  EXPECT_EQ(e3::jobs::trainer_seq_limit(ExportFormat::Speculators).tokens, 8192);
  EXPECT_EQ(e3::jobs::trainer_seq_limit(ExportFormat::SpecForge).tokens, 2048);
  EXPECT_EQ(e3::jobs::trainer_seq_limit(ExportFormat::ModelOpt).tokens, 2048);
}

TEST(ExportLengths, ASampleOfExactlyTheLimitIsWhole) {
  const auto r = length_report(ExportFormat::Speculators, {8192, 7, 100});
  EXPECT_EQ(r.samples, 3);
  EXPECT_EQ(r.longer, 0);
  EXPECT_EQ(r.longest, 8192);
  EXPECT_EQ(length_message(r),
            "the longest of the 3 samples has 8192 tokens, within speculators' default --total-seq-len = 8192: none "
            "is cut");
}

TEST(ExportLengths, LongerSamplesAreCountedWithTheSettingToPass) {
  const auto spec = length_report(ExportFormat::Speculators, {8193, 10, 9000});
  EXPECT_EQ(spec.longer, 2);
  EXPECT_EQ(spec.longest, 9000);
  EXPECT_EQ(length_message(spec),
            "2 of 3 samples are longer than speculators' default --total-seq-len = 8192, which cuts them to 8192 "
            "tokens: pass --total-seq-len 9000 (the longest sample) or more to train on them whole");
  const auto sf = length_report(ExportFormat::SpecForge, {2048, 2049, 5});
  EXPECT_EQ(sf.longer, 1);
  EXPECT_EQ(length_message(sf),
            "1 of 3 samples are longer than SpecForge's default data.max_length = 2048, which cuts them to 2048 "
            "tokens: pass data.max_length=2049 (the longest sample) or more to train on them whole");
  const auto mo = length_report(ExportFormat::ModelOpt, {4000, 3000});
  EXPECT_EQ(mo.longer, 2);
  EXPECT_EQ(length_message(mo),
            "2 of 2 samples are longer than ModelOpt's default training.training_seq_len = 2048, which cuts them to "
            "2048 tokens: pass training.training_seq_len=4000 (the longest sample) or more to train on them whole");
}

TEST(ExportLengths, ModelOptTakesItsAuxLayersAscending) {
  EXPECT_EQ(exported_capture_order(ExportFormat::ModelOpt, {5, 2, 4}), (std::vector<size_t>{1, 2, 0}));
  EXPECT_EQ(exported_capture_order(ExportFormat::ModelOpt, {2, 16, 29}), (std::vector<size_t>{0, 1, 2}));
  // The other trainers take the captures in the order they were given.
  EXPECT_EQ(exported_capture_order(ExportFormat::SpecForge, {5, 2, 4}), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(exported_capture_order(ExportFormat::Speculators, {5, 2, 4}), (std::vector<size_t>{0, 1, 2}));
}
