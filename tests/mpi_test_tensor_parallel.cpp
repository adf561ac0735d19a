// Runs under mpirun -np 2 and -np 4: the same model at TP = world size and at TP = 1 gives
// the same hidden states to fp32 rounding, and every TP rank holds the same residual stream.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "io/dataset.h"
#include "model/model.h"
#include "parallel/mpi_env.h"
#include "support/host_capture.h"
#include "support/test_support.h"

namespace e3 {
namespace {

struct Captured {
  std::vector<std::vector<float>> layers;  // per capture id: [tokens, H]
  std::vector<float> final_state;
};

Captured run_model(const std::string& case_name, MPI_Comm tp_comm, model::FinalMode final) {
  const auto dir = test::golden_case(case_name);
  const model::ModelConfig cfg = model::load_model_config(dir);
  const model::Checkpoint ckpt(dir);
  const io::Dataset data = io::Dataset::open(dir / "input.jsonl", {cfg.vocab_size, 1024, io::OnLong::Error});
  auto backend = kernels::make_cpu_backend(1);
  auto comm = parallel::make_mpi_communicator(tp_comm, *backend);
  model::HostBatch batch;
  batch.clear();
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (const auto& r : data.samples()) {
    data.read(r, ids, mask);
    batch.add_sequence(ids.data(), static_cast<int64_t>(ids.size()));
  }
  model::ModelOptions opt{comm->rank(), comm->size(), batch.num_tokens(), batch.max_seqlen};
  auto m = model::load_model(cfg, ckpt, *backend, *comm, opt);
  std::vector<int> all;
  for (int i = 0; i < cfg.num_hidden_layers; ++i) all.push_back(i);
  test::HostCapture cap(*backend, all, final, cfg.hidden_size, batch.num_tokens());
  cap.begin_step(batch.num_tokens());
  m->forward(batch, &cap);  // every TP rank captures here, to compare them
  cap.audit(comm->rank());
  Captured out;
  const size_t n = static_cast<size_t>(batch.num_tokens() * cfg.hidden_size);
  for (size_t k = 0; k < all.size(); ++k) out.layers.emplace_back(cap.layer(k), cap.layer(k) + n);
  const float* fin = cap.final_state(model::stored_finals(final).front());
  out.final_state.assign(fin, fin + n);
  return out;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

class TensorParallel : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallel, MatchesSingleRankAndAgreesAcrossRanks) {
  parallel::Grid grid(0);  // TP = all ranks
  const Captured tp = run_model(GetParam(), grid.tp_comm(), model::FinalMode::PreNorm);
  const Captured single = run_model(GetParam(), MPI_COMM_SELF, model::FinalMode::PreNorm);
  ASSERT_EQ(tp.layers.size(), single.layers.size());
  for (size_t k = 0; k < tp.layers.size(); ++k)
    EXPECT_LT(rel_err(tp.layers[k], single.layers[k]), 2e-6) << "capture id " << k;
  EXPECT_LT(rel_err(tp.final_state, single.final_state), 2e-6);

  // The residual stream after each all-reduce is bitwise the same on every TP rank.
  std::vector<float> root = tp.final_state;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, grid.tp_comm());
  EXPECT_EQ(root, tp.final_state) << "rank " << grid.tp_rank() << " diverged from rank 0";
}

INSTANTIATE_TEST_SUITE_P(Golden, TensorParallel,
                         ::testing::Values("dev_llama3", "s_qwen3_kv1_bias", "llama_linear_bias", "dev_kimi_k2",
                                           "s_qwen3_moe_b", "s_dsv2_grouped"));

}  // namespace
}  // namespace e3
