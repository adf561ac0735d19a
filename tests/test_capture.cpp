// Capture points and their audit: a forward pass that captures the wrong thing must stop
// the run with a message that says which rank, which id and what shape.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "core/error.h"
#include "model/capture.h"
#include "support/host_capture.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::DType;
using e3::kernels::Tensor;
using e3::model::CaptureAudit;
using e3::model::FinalMode;
using e3::model::FinalNorm;
using e3::test::HostCapture;

// Runs `f`, expects an e3::Error of `kind`, and returns its message.
template <typename F>
std::string error_of(F&& f, ErrorKind kind) {
  try {
    f();
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "'" << (part) << "' not in: " << (text)

// ---------------------------------------------------------------- CaptureAudit

TEST(CaptureAudit, PassesWhenEachIdIsCapturedOnceWithTheRightShape) {
  CaptureAudit audit({0, 2}, FinalMode::PostNorm, 8);
  audit.begin_step(5);
  audit.record(2, 5, 8);  // order of capture does not matter
  audit.record(0, 5, 8);
  audit.record(CaptureAudit::kFinalPost, 5, 8);
  EXPECT_NO_THROW(audit.check(3));
}

TEST(CaptureAudit, FailsWhenAnIdIsMissing) {
  CaptureAudit audit({0, 2}, FinalMode::None, 8);
  audit.begin_step(5);
  audit.record(0, 5, 8);
  const std::string msg = error_of([&] { audit.check(3); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "rank 3");
  EXPECT_HAS(msg, "capture id 2");
  EXPECT_HAS(msg, "0 times");
  EXPECT_HAS(msg, "[5, 8]");
}

TEST(CaptureAudit, FailsWhenTheFinalStateIsMissing) {
  CaptureAudit audit({1}, FinalMode::PreNorm, 8);
  audit.begin_step(4);
  audit.record(1, 4, 8);
  const std::string msg = error_of([&] { audit.check(0); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "rank 0");
  EXPECT_HAS(msg, "final");
  EXPECT_HAS(msg, "[4, 8]");
}

TEST(CaptureAudit, FailsWhenAnIdIsCapturedTwice) {
  CaptureAudit audit({0, 2}, FinalMode::None, 8);
  audit.begin_step(5);
  audit.record(0, 5, 8);
  audit.record(2, 5, 8);
  audit.record(0, 5, 8);
  const std::string msg = error_of([&] { audit.check(1); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "rank 1");
  EXPECT_HAS(msg, "capture id 0");
  EXPECT_HAS(msg, "2 times");
  EXPECT_HAS(msg, "[5, 8]");
}

TEST(CaptureAudit, FailsOnWrongShapeNamingShapeSeenAndExpected) {
  CaptureAudit audit({0, 2}, FinalMode::None, 8);
  audit.begin_step(5);
  audit.record(0, 5, 8);
  audit.record(2, 5, 4);  // e.g. a TP-local slice captured instead of the full state
  const std::string msg = error_of([&] { audit.check(2); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "rank 2");
  EXPECT_HAS(msg, "capture id 2");
  EXPECT_HAS(msg, "[5, 4]");
  EXPECT_HAS(msg, "[5, 8]");
}

TEST(CaptureAudit, FailsOnWrongTokenCount) {
  CaptureAudit audit({0}, FinalMode::None, 8);
  audit.begin_step(5);
  audit.record(0, 3, 8);
  const std::string msg = error_of([&] { audit.check(0); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "[3, 8]");
  EXPECT_HAS(msg, "[5, 8]");
}

TEST(CaptureAudit, FailsWhenAnUnrequestedIdIsCaptured) {
  CaptureAudit audit({0, 2}, FinalMode::None, 8);
  audit.begin_step(5);
  audit.record(0, 5, 8);
  audit.record(2, 5, 8);
  audit.record(4, 5, 8);
  const std::string msg = error_of([&] { audit.check(3); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "rank 3");
  EXPECT_HAS(msg, "capture id 4");
  EXPECT_HAS(msg, "not requested");
  // capture.h: check() "throws an audit error naming the rank, the id, and the shape seen".
  EXPECT_HAS(msg, "[5, 8]");
}

TEST(CaptureAudit, FailsWhenAnUnrequestedFinalStateIsCaptured) {
  CaptureAudit audit({0}, FinalMode::None, 8);
  audit.begin_step(2);
  audit.record(0, 2, 8);
  audit.record(CaptureAudit::kFinalPost, 2, 8);
  const std::string msg = error_of([&] { audit.check(0); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "not requested");
  // The final state is reported as "final" elsewhere; the internal -1 means nothing to a user.
  EXPECT_HAS(msg, "final");
}

TEST(CaptureAudit, BeginStepResetsCounts) {
  CaptureAudit audit({1}, FinalMode::None, 8);
  audit.begin_step(3);
  audit.record(1, 3, 8);
  audit.record(7, 3, 8);
  EXPECT_THROW(audit.check(0), e3::Error);
  audit.begin_step(6);
  audit.record(1, 6, 8);
  EXPECT_NO_THROW(audit.check(0));
  // Without a new begin_step a second capture in the same step is a duplicate.
  audit.record(1, 6, 8);
  EXPECT_THROW(audit.check(0), e3::Error);
}

// ---------------------------------------------------------------- HostCapture

TEST(CaptureHost, LayersInRequestOrderWithDuplicates) {
  auto backend = e3::kernels::make_cpu_backend(1);
  const int64_t H = 4, T = 3, max_tokens = 6;
  HostCapture cap(*backend, {3, 1, 3}, FinalMode::PostNorm, H, max_tokens);
  EXPECT_EQ(cap.num_ids(), 3u);
  EXPECT_EQ(cap.hidden_size(), H);
  EXPECT_EQ(cap.final_mode(), FinalMode::PostNorm);
  EXPECT_TRUE(cap.wants(1));
  EXPECT_TRUE(cap.wants(3));
  EXPECT_FALSE(cap.wants(0));
  EXPECT_FALSE(cap.wants(2));

  auto a = e3::test::random_floats(T * H, 1);
  // Layer 3's state arrives as a strided view (columns of a wider buffer).
  auto wide = e3::test::random_floats(T * 2 * H, 2);
  auto fin = e3::test::random_floats(T * H, 3);
  cap.begin_step(T);
  cap.capture(1, Tensor(a.data(), DType::F32, T, H));
  cap.capture(3, Tensor(wide.data(), DType::F32, T, 2 * H).col_slice(H, H));
  cap.capture_final(FinalNorm::Post, Tensor(fin.data(), DType::F32, T, H));
  EXPECT_NO_THROW(cap.audit(0));

  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float want3 = wide[t * 2 * H + H + h];
      EXPECT_EQ(cap.layer(0)[t * H + h], want3);
      EXPECT_EQ(cap.layer(1)[t * H + h], a[t * H + h]);
      EXPECT_EQ(cap.layer(2)[t * H + h], want3);
      EXPECT_EQ(cap.final_state(FinalNorm::Post)[t * H + h], fin[t * H + h]);
    }
}

TEST(CaptureHost, BothKeepsTheStatesBeforeAndAfterTheFinalNorm) {
  auto backend = e3::kernels::make_cpu_backend(1);
  const int64_t H = 4, T = 3;
  HostCapture cap(*backend, {1}, FinalMode::Both, H, T);
  auto a = e3::test::random_floats(T * H, 1), pre = e3::test::random_floats(T * H, 2),
       post = e3::test::random_floats(T * H, 3);
  cap.begin_step(T);
  cap.capture(1, Tensor(a.data(), DType::F32, T, H));
  cap.capture_final(FinalNorm::Pre, Tensor(pre.data(), DType::F32, T, H));
  // One of the two is missing: the audit names it.
  try {
    cap.audit(0);
    FAIL() << "the audit accepted a step without the post-norm final state";
  } catch (const e3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("final (post-norm)"), std::string::npos) << e.what();
  }
  cap.begin_step(T);
  cap.capture(1, Tensor(a.data(), DType::F32, T, H));
  cap.capture_final(FinalNorm::Pre, Tensor(pre.data(), DType::F32, T, H));
  cap.capture_final(FinalNorm::Post, Tensor(post.data(), DType::F32, T, H));
  EXPECT_NO_THROW(cap.audit(0));
  for (int64_t i = 0; i < T * H; ++i) {
    EXPECT_EQ(cap.final_state(FinalNorm::Pre)[i], pre[i]);
    EXPECT_EQ(cap.final_state(FinalNorm::Post)[i], post[i]);
  }
  HostCapture post_only(*backend, {1}, FinalMode::PostNorm, H, T);
  EXPECT_EQ(post_only.final_state(FinalNorm::Pre), nullptr);
  EXPECT_EQ(e3::model::stored_finals(FinalMode::Both),
            (std::vector<FinalNorm>{FinalNorm::Post, FinalNorm::Pre}));
}

TEST(CaptureHost, ConvertsFromTheBackendDtype) {
  auto backend = e3::kernels::make_cpu_backend(1);
  const int64_t H = 2, T = 2;
  HostCapture cap(*backend, {0}, FinalMode::None, H, T);
  std::vector<uint16_t> bf{e3::float_to_bf16(1.5f), e3::float_to_bf16(-2.0f),
                           e3::float_to_bf16(0.25f), e3::float_to_bf16(3.0f)};
  cap.begin_step(T);
  cap.capture(0, Tensor(bf.data(), DType::BF16, T, H));
  EXPECT_NO_THROW(cap.audit(0));
  EXPECT_EQ(std::vector<float>(cap.layer(0), cap.layer(0) + T * H), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}));
}

TEST(CaptureHost, AuditSeesWhatTheForwardPassDid) {
  auto backend = e3::kernels::make_cpu_backend(1);
  const int64_t H = 4, T = 2;
  HostCapture cap(*backend, {0, 2}, FinalMode::None, H, 4);
  auto x = e3::test::random_floats(T * H, 4);
  cap.begin_step(T);
  cap.capture(0, Tensor(x.data(), DType::F32, T, H));
  cap.capture(5, Tensor(x.data(), DType::F32, T, H));  // not requested: ignored, but audited
  const std::string msg = error_of([&] { cap.audit(1); }, ErrorKind::Audit);
  EXPECT_HAS(msg, "rank 1");
  EXPECT_HAS(msg, "capture id 5");

  cap.begin_step(T);
  cap.capture(0, Tensor(x.data(), DType::F32, T, H));
  cap.capture(2, Tensor(x.data(), DType::F32, T, H - 1));  // wrong width: not copied, audited
  const std::string msg2 = error_of([&] { cap.audit(1); }, ErrorKind::Audit);
  EXPECT_HAS(msg2, "capture id 2");
  EXPECT_HAS(msg2, "[2, 3]");
}

TEST(CaptureHost, DistinctIdsKeepFirstSeenOrder) {
  EXPECT_EQ(e3::model::distinct_ids({3, 1, 3, 0, 1}), (std::vector<int>{3, 1, 0}));
  EXPECT_TRUE(e3::model::distinct_ids({}).empty());
}

// ---------------------------------------------------------------- ids and modes

TEST(CaptureIds, AcceptsIdsBelowLayerCount) {
  EXPECT_NO_THROW(e3::model::validate_capture_ids({0, 3, 5, 3}, 6));
}

TEST(CaptureIds, RejectsNegativeId) {
  const std::string msg = error_of([] { e3::model::validate_capture_ids({1, -1}, 6); }, ErrorKind::Usage);
  EXPECT_HAS(msg, "-1");
}

TEST(CaptureIds, RejectsIdAtOrAboveLayerCount) {
  const std::string msg = error_of([] { e3::model::validate_capture_ids({0, 6}, 6); }, ErrorKind::Usage);
  EXPECT_HAS(msg, "capture id 6");
  EXPECT_HAS(msg, "6 layers");
  error_of([] { e3::model::validate_capture_ids({100}, 6); }, ErrorKind::Usage);
}

TEST(CaptureIds, RejectsEmptyRequest) { error_of([] { e3::model::validate_capture_ids({}, 6); }, ErrorKind::Usage); }

TEST(CaptureFinalMode, ParsesAndNames) {
  EXPECT_EQ(e3::value_named<FinalMode>("post-norm"), FinalMode::PostNorm);
  EXPECT_EQ(e3::value_named<FinalMode>("pre-norm"), FinalMode::PreNorm);
  EXPECT_EQ(e3::value_named<FinalMode>("both"), FinalMode::Both);
  EXPECT_EQ(e3::value_named<FinalMode>("none"), FinalMode::None);
  for (FinalMode m : {FinalMode::PostNorm, FinalMode::PreNorm, FinalMode::Both, FinalMode::None})
    EXPECT_EQ(e3::value_named<FinalMode>(e3::name_of(m)), m);
  const std::string msg = error_of([] { e3::parse_named<FinalMode>("postnorm", "--final"); }, ErrorKind::Usage);
  EXPECT_EQ(msg, "--final: must be post-norm, pre-norm, both or none, not 'postnorm' (did you mean 'post-norm'?)");
}

}  // namespace
