// Quantized weights: the dequantization math against values worked out independently, slices
// that cut through blocks and groups, the loader's checks and errors, and quantization_config.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/quant.h"
#include "model/config.h"
#include "model/weights.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::bf16_to_float;
using e3::kernels::dequantize_block;
using e3::e4m3fn_to_float;
using e3::float_to_bf16;
using e3::kernels::Fp8BlockWeight;
using e3::kernels::Int4GroupWeight;
using e3::kernels::QuantStack;
using e3::kernels::ScaleType;
using e3::model::QuantConfig;
using e3::test::Contains;
using e3::test::error_of;
using nlohmann::json;

// fp32 product (a double product of these operands is exact, then rounded once to fp32),
// then bf16 nearest-even.
float bf16_of_product(float a, float b) {
  const float p = static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
  return bf16_to_float(float_to_bf16(p));
}

TEST(Quant, E4m3fnDecodesKnownValues) {
  EXPECT_EQ(e4m3fn_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3fn_to_float(0x80)));
  EXPECT_EQ(e4m3fn_to_float(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(e4m3fn_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3fn_to_float(0x08), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(e4m3fn_to_float(0x38), 1.0f);                   // exponent 7 = bias
  EXPECT_EQ(e4m3fn_to_float(0x3C), 1.5f);
  EXPECT_EQ(e4m3fn_to_float(0x7E), 448.0f);                 // largest finite
  EXPECT_EQ(e4m3fn_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3fn_to_float(0xC0), -2.0f);
  int nans = 0;
  for (int b = 0; b < 256; ++b) nans += std::isnan(e4m3fn_to_float(static_cast<uint8_t>(b)));
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only: no infinities in the fn variant
  for (int b = 1; b < 0x7F; ++b)
    EXPECT_LT(e4m3fn_to_float(static_cast<uint8_t>(b - 1)), e4m3fn_to_float(static_cast<uint8_t>(b))) << b;
}

// A [5, 7] FP8 weight in 2 x 3 blocks (scale [3, 3]): blocks cut rows and columns unevenly.
struct Fp8Case {
  std::vector<uint8_t> q;
  std::vector<float> scale_f32;
  std::vector<uint16_t> scale_bf16;
  static constexpr int64_t R = 5, C = 7, BR = 2, BC = 3;
  Fp8Case() {
    for (int64_t i = 0; i < R * C; ++i) q.push_back(static_cast<uint8_t>((i * 37 + 11) % 256 == 0x7F ? 0x10 : (i * 37 + 11) % 256));
    for (int i = 0; i < 9; ++i) {
      scale_f32.push_back(1.2345678f * static_cast<float>(i + 1) * 1e-2f);  // needs rounding in the product
      scale_bf16.push_back(float_to_bf16(0.0078125f * static_cast<float>(i + 3)));
    }
  }
  float expected(int64_t r, int64_t c, bool bf16_scale) const {
    const int64_t s = (r / BR) * 3 + c / BC;
    const float scale = bf16_scale ? bf16_to_float(scale_bf16[static_cast<size_t>(s)]) : scale_f32[static_cast<size_t>(s)];
    return bf16_of_product(e4m3fn_to_float(q[static_cast<size_t>(r * C + c)]), scale);
  }
};

TEST(Quant, Fp8BlockScalesEveryElementAndSlicesCutBlocks) {
  const Fp8Case k;
  for (bool bf16_scale : {false, true}) {
    SCOPED_TRACE(bf16_scale ? "bf16 scales" : "f32 scales");
    const Fp8BlockWeight w{k.q.data(), bf16_scale ? static_cast<const void*>(k.scale_bf16.data()) : k.scale_f32.data(),
                           bf16_scale ? ScaleType::BF16 : ScaleType::F32, k.R, k.C, k.BR, k.BC, 0, 0};
    for (auto [r0, rows, c0, cols] : {std::array<int64_t, 4>{0, 5, 0, 7}, {1, 3, 2, 4}, {4, 1, 5, 2}}) {
      std::vector<float> out(static_cast<size_t>(rows * cols));
      dequantize_block(w, r0, rows, c0, cols, out.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          EXPECT_EQ(out[static_cast<size_t>(r * cols + c)], k.expected(r0 + r, c0 + c, bf16_scale)) << r0 + r << "," << c0 + c;
    }
  }
}

TEST(Quant, Fp8SliceStartingInsideABlockUsesTheCoveringScales) {
  // Rows [1, 4) x columns [2, 7) of the [5, 7] weight, kept as a slice: its bytes, and the
  // scales of the blocks covering it (block rows 0..1, block columns 0..2 of the 3 x 3 grid).
  const Fp8Case k;
  const int64_t r0 = 1, rows = 3, c0 = 2, cols = 5;
  QuantStack st;
  st.format = QuantStack::Format::Fp8Block;
  st.scale_type = ScaleType::F32;
  st.count = 1;
  st.rows = rows;
  st.cols = cols;
  st.block_rows = Fp8Case::BR;
  st.block_cols = Fp8Case::BC;
  st.row_offset = r0 % Fp8Case::BR;
  st.col_offset = c0 % Fp8Case::BC;
  ASSERT_EQ(st.scale_rows(), 2);
  ASSERT_EQ(st.scale_cols(), 3);
  std::vector<uint8_t> q;
  for (int64_t r = r0; r < r0 + rows; ++r)
    for (int64_t c = c0; c < c0 + cols; ++c) q.push_back(k.q[static_cast<size_t>(r * Fp8Case::C + c)]);
  std::vector<float> scale;
  for (int64_t i = r0 / Fp8Case::BR; i < r0 / Fp8Case::BR + st.scale_rows(); ++i)
    for (int64_t j = c0 / Fp8Case::BC; j < c0 / Fp8Case::BC + st.scale_cols(); ++j)
      scale.push_back(k.scale_f32[static_cast<size_t>(i * 3 + j)]);
  st.q = q.data();
  st.scale = scale.data();
  std::vector<float> out(static_cast<size_t>(rows * cols));
  e3::kernels::dequantize_stack(st, out.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(out[static_cast<size_t>(r * cols + c)], k.expected(r0 + r, c0 + c, false)) << r << "," << c;
}

// A [3, 40] INT4 weight in groups of 32 (scale [3, 2]; the last group is partial).
struct Int4Case {
  static constexpr int64_t R = 3, C = 40, G = 32, W = 5;
  std::vector<int32_t> packed;
  std::vector<uint16_t> scale;
  static int value(int64_t r, int64_t c) { return static_cast<int>((r * 7 + c * 3) % 16) - 8; }  // -8..7
  Int4Case() {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t w = 0; w < W; ++w) {
        uint32_t word = 0;
        for (int i = 0; i < 8; ++i) word |= static_cast<uint32_t>(value(r, w * 8 + i) + 8) << (4 * i);
        int32_t s;
        std::memcpy(&s, &word, 4);
        packed.push_back(s);
      }
    for (int64_t i = 0; i < R * 2; ++i) scale.push_back(float_to_bf16(-0.0123f * static_cast<float>(i + 1)));
  }
  float expected(int64_t r, int64_t c) const {
    return bf16_of_product(static_cast<float>(value(r, c)), bf16_to_float(scale[static_cast<size_t>(r * 2 + c / G)]));
  }
};

TEST(Quant, Int4NibbleOrderOffsetBinaryAndGroups) {
  const Int4Case k;
  const Int4GroupWeight w{k.packed.data(), k.scale.data(), k.R, k.C, k.G};
  for (auto [r0, rows, c0, cols] : {std::array<int64_t, 4>{0, 3, 0, 40}, {1, 2, 13, 20}, {2, 1, 31, 9}}) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    dequantize_block(w, r0, rows, c0, cols, out.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        EXPECT_EQ(out[static_cast<size_t>(r * cols + c)], k.expected(r0 + r, c0 + c)) << r0 + r << "," << c0 + c;
  }
  // Element 8 w + i is nibble i of word w, value nibble - 8: word 0 of row 0 holds 8 + value(0, i).
  EXPECT_EQ(static_cast<uint32_t>(k.packed[0]) & 0xFu, static_cast<uint32_t>(Int4Case::value(0, 0) + 8));
}

// ------------------------------------------------------------------------------- the loader

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

class QuantLoader : public ::testing::Test {
 protected:
  void write(const std::vector<e3::test::StTensor>& tensors) {
    e3::test::write_safetensors(dir_ / "model.safetensors", tensors);
    ckpt_.emplace(dir_.path());
  }
  std::vector<float> load(const e3::model::WeightSpec& spec, const QuantConfig& q) {
    e3::model::WeightLoader loader(&*ckpt_, *backend_, store_);
    loader.set_quantization(q);
    const e3::kernels::Tensor t = loader.load(spec);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    backend_->download_float(t, out.data());
    return out;
  }
  std::string error(const e3::model::WeightSpec& spec, const QuantConfig& q) {
    auto err = error_of([&] { load(spec, q); });
    if (!err) return "no error";
    EXPECT_EQ(err->kind(), ErrorKind::Model);
    return err->what();
  }
  static QuantConfig fp8() {
    QuantConfig q;
    q.method = QuantConfig::Method::Fp8Block;
    q.block_rows = Fp8Case::BR;
    q.block_cols = Fp8Case::BC;
    return q;
  }
  static QuantConfig int4() {
    QuantConfig q;
    q.method = QuantConfig::Method::Int4Pack;
    q.group_size = Int4Case::G;
    return q;
  }
  std::vector<e3::test::StTensor> fp8_tensors(std::vector<int64_t> scale_shape = {3, 3}) const {
    return {{"w.weight", "F8_E4M3", {Fp8Case::R, Fp8Case::C}, fp8_.q},
            {"w.weight_scale_inv", "F32", scale_shape, raw(std::vector<float>(fp8_.scale_f32.begin(), fp8_.scale_f32.begin() + scale_shape[0] * scale_shape[1]))}};
  }
  std::vector<e3::test::StTensor> int4_tensors(std::vector<int64_t> stored_shape = {3, 40}) const {
    return {{"e.weight_packed", "I32", {Int4Case::R, Int4Case::W}, raw(int4_.packed)},
            {"e.weight_scale", "BF16", {Int4Case::R, 2}, raw(int4_.scale)},
            {"e.weight_shape", "I64", {2}, raw(stored_shape)}};
  }

  e3::test::TempDir dir_;
  std::optional<e3::model::Checkpoint> ckpt_;
  std::unique_ptr<e3::kernels::Backend> backend_ = e3::kernels::make_cpu_backend(1);
  e3::model::WeightStore store_;
  Fp8Case fp8_;
  Int4Case int4_;
};

using e3::model::WeightSpec;

TEST_F(QuantLoader, QuantizedWeightsLoadAsTheirBf16Values) {
  auto tensors = fp8_tensors();
  for (auto& t : int4_tensors()) tensors.push_back(t);
  write(tensors);
  const std::vector<int64_t> fshape{Fp8Case::R, Fp8Case::C}, ishape{Int4Case::R, Int4Case::C};
  const std::vector<float> f = load(WeightSpec::row_block("w.weight", fshape, 1, 3), fp8());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < Fp8Case::C; ++c) EXPECT_EQ(f[static_cast<size_t>(r * Fp8Case::C + c)], fp8_.expected(1 + r, c, false));
  const std::vector<float> fc = load(WeightSpec::col_block("w.weight", fshape, 2, 4), fp8());
  for (int64_t r = 0; r < Fp8Case::R; ++r)
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(fc[static_cast<size_t>(r * 4 + c)], fp8_.expected(r, 2 + c, false));
  const std::vector<float> i = load(WeightSpec::col_block("e.weight", ishape, 13, 20), int4());
  for (int64_t r = 0; r < Int4Case::R; ++r)
    for (int64_t c = 0; c < 20; ++c) EXPECT_EQ(i[static_cast<size_t>(r * 20 + c)], int4_.expected(r, 13 + c));
}

TEST_F(QuantLoader, ErrorsNameTheTensorTheFileAndWhatIsWrong) {
  const std::string file = (dir_ / "model.safetensors").string();
  const std::vector<int64_t> fshape{Fp8Case::R, Fp8Case::C}, ishape{Int4Case::R, Int4Case::C};

  write({fp8_tensors()[0]});
  std::string e = error(WeightSpec::replicated("w.weight", fshape), fp8());
  EXPECT_TRUE(Contains(e, "FP8 tensor 'w.weight' in " + file + " has no scale: 'w.weight_scale_inv' is missing")) << e;
  e = error(WeightSpec::replicated("w.weight", fshape), QuantConfig{});
  EXPECT_TRUE(Contains(e, "tensor 'w.weight' in " + file + " is F8_E4M3, but config.json's quantization_config is none")) << e;

  write(fp8_tensors({3, 2}));
  e = error(WeightSpec::replicated("w.weight", fshape), fp8());
  EXPECT_TRUE(Contains(e, "scale 'w.weight_scale_inv' in " + file + " has shape [3, 2], expected [3, 3]")) << e;

  auto no_scale = int4_tensors();
  no_scale.erase(no_scale.begin() + 1);
  write(no_scale);
  e = error(WeightSpec::replicated("e.weight", ishape), int4());
  EXPECT_TRUE(Contains(e, "INT4 tensor 'e.weight_packed' in " + file + " has no scale: 'e.weight_scale' is missing")) << e;

  write(int4_tensors({3, 48}));
  e = error(WeightSpec::replicated("e.weight", ishape), int4());
  EXPECT_TRUE(Contains(e, "INT4 weight 'e.weight' in " + file + " has weight_shape [3, 48], expected [3, 40]")) << e;

  QuantConfig g16 = int4();
  g16.group_size = 16;
  write(int4_tensors());
  e = error(WeightSpec::replicated("e.weight", ishape), g16);
  EXPECT_TRUE(Contains(e, "scale 'e.weight_scale' in " + file + " has shape [3, 2], expected [3, 3]")) << e;
  e = error(WeightSpec::replicated("e.weight", ishape), fp8());
  EXPECT_TRUE(Contains(e, "is INT4 pack-quantized, but config.json's quantization_config is fp8 e4m3")) << e;

  auto zp = int4_tensors();
  zp.push_back({"e.weight_zero_point", "I32", {3, 1}, raw(std::vector<int32_t>{0, 0, 0})});
  write(zp);
  e = error(WeightSpec::replicated("e.weight", ishape), int4());
  EXPECT_TRUE(Contains(e, "has zero points ('e.weight_zero_point'): asymmetric int4 is not supported")) << e;
}

// ---------------------------------------------------------------------- quantization_config

json llama_with(const json& quant) {
  json c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
            {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 32}};
  c["quantization_config"] = quant;
  return c;
}

json int4_scheme(const json& weights_patch, const json& group_patch = json::object()) {
  json w = {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 32}};
  w.merge_patch(weights_patch);
  json g = {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", nullptr}};
  g.merge_patch(group_patch);
  return {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"config_groups", {{"group_0", g}}}};
}

std::string config_error(const json& doc) {
  auto err = error_of([&] { e3::model::parse_model_config(doc, "/m/config.json"); });
  if (!err) return "no error";
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  return err->what();
}

TEST(QuantConfigParse, SupportedSchemes) {
  const auto fp8 = e3::model::parse_model_config(
      llama_with({{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 64}}}), "/m/config.json");
  EXPECT_EQ(fp8.quant.method, QuantConfig::Method::Fp8Block);
  EXPECT_EQ(fp8.quant.block_rows, 128);
  EXPECT_EQ(fp8.quant.block_cols, 64);
  const auto int4 = e3::model::parse_model_config(llama_with(int4_scheme({{"group_size", 64}})), "/m/config.json");
  EXPECT_EQ(int4.quant.method, QuantConfig::Method::Int4Pack);
  EXPECT_EQ(int4.quant.group_size, 64);
  EXPECT_EQ(e3::model::parse_model_config(llama_with(nullptr), "/m/config.json").quant.method, QuantConfig::Method::None);
}

TEST(QuantConfigParse, UnsupportedSchemesAreNamed) {
  EXPECT_TRUE(Contains(config_error(llama_with({{"quant_method", "awq"}})),
                       "quantization_config.quant_method 'awq' is not supported"));
  EXPECT_TRUE(Contains(config_error(llama_with({{"quant_method", "fp8"}})), "fp8 needs weight_block_size"));
  json fmt = int4_scheme(json::object());
  fmt["format"] = "float-quantized";
  EXPECT_TRUE(Contains(config_error(llama_with(fmt)), "compressed-tensors format 'float-quantized' is not supported"));
  EXPECT_TRUE(Contains(config_error(llama_with(int4_scheme({{"num_bits", 8}}))), "num_bits 8 is not supported (only 4)"));
  EXPECT_TRUE(Contains(config_error(llama_with(int4_scheme({{"symmetric", false}}))),
                       "asymmetric int4 (zero points) is not supported"));
  EXPECT_TRUE(Contains(config_error(llama_with(int4_scheme(json::object(), {{"input_activations", {{"num_bits", 8}}}}))),
                       "activation quantization (input_activations) is not supported"));
}

}  // namespace

// --dtype fp8 storage: encode_e4m3_row against values worked out by hand.
namespace {

using e3::decode_e4m3_row;
using e3::e4m3_row_bad_column;
using e3::e4m3_row_scale_of;
using e3::encode_e4m3_row;
using e3::float_to_e4m3fn_sat;

std::vector<uint8_t> encode(const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() + 4, 0xAA);
  encode_e4m3_row(x.data(), static_cast<int64_t>(x.size()), out.data());
  return out;
}

TEST(Fp8Encode, KnownCodes) {
  EXPECT_EQ(float_to_e4m3fn_sat(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3fn_sat(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3fn_sat(1.0f), 0x38);    // exponent 7, mantissa 0
  EXPECT_EQ(float_to_e4m3fn_sat(-1.5f), 0xBC);   // sign, exponent 7, mantissa 4
  EXPECT_EQ(float_to_e4m3fn_sat(448.0f), 0x7E);  // the largest finite value
  EXPECT_EQ(float_to_e4m3fn_sat(0.015625f), 0x08);        // 2^-6, the smallest normal
  EXPECT_EQ(float_to_e4m3fn_sat(0.001953125f), 0x01);     // 2^-9, the smallest subnormal
  EXPECT_EQ(float_to_e4m3fn_sat(7 * 0.001953125f), 0x07); // the largest subnormal
  // Every finite code decodes to a value that encodes back to it (the two tables agree).
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(float_to_e4m3fn_sat(e4m3fn_to_float(static_cast<uint8_t>(b))), b) << b;
  }
}

TEST(Fp8Encode, RoundsToNearestTiesToEven) {
  // Between 1 (0x38) and 1.125 (0x39): the midpoint goes to the even mantissa 0, just above it up.
  EXPECT_EQ(float_to_e4m3fn_sat(1.0625f), 0x38);
  EXPECT_EQ(float_to_e4m3fn_sat(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(float_to_e4m3fn_sat(1.1875f), 0x3A);  // between 0x39 and 0x3A: to the even 0x3A
  // Subnormals: 1.5 and 2.5 units of 2^-9 go to 2 units.
  EXPECT_EQ(float_to_e4m3fn_sat(1.5f * 0.001953125f), 0x02);
  EXPECT_EQ(float_to_e4m3fn_sat(2.5f * 0.001953125f), 0x02);
  // Half the smallest subnormal rounds to zero (even), just above it to the smallest.
  EXPECT_EQ(float_to_e4m3fn_sat(0.5f * 0.001953125f), 0x00);
  EXPECT_EQ(float_to_e4m3fn_sat(std::nextafter(0.5f * 0.001953125f, 1.0f)), 0x01);
  // Between the largest subnormal (7 units) and 2^-6 (8 units): ties to the even 8, the normal.
  EXPECT_EQ(float_to_e4m3fn_sat(7.5f * 0.001953125f), 0x08);
}

TEST(Fp8Encode, SaturatesAtTheLargestFiniteValueAndNeverGivesNaN) {
  EXPECT_EQ(float_to_e4m3fn_sat(464.0f), 0x7E);  // the midpoint to the (NaN) next step
  EXPECT_EQ(float_to_e4m3fn_sat(500.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3fn_sat(-1e30f), 0xFE);
  EXPECT_EQ(float_to_e4m3fn_sat(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_e4m3fn_sat(std::nextafter(448.0f, 0.0f)), 0x7E);
}

TEST(Fp8Encode, RowScaleIsAmaxOver448AndAmaxMapsTo448) {
  const std::vector<float> x = {1.0f, -896.0f, 3.0f, 0.0f};
  const auto out = encode(x);
  EXPECT_EQ(e4m3_row_scale_of(out.data(), 4), 2.0f);
  EXPECT_EQ(out[1], 0xFE);  // -448 * 2
  EXPECT_EQ(out[0], float_to_e4m3fn_sat(0.5f));
  EXPECT_EQ(out[2], float_to_e4m3fn_sat(1.5f));
  EXPECT_EQ(out[3], 0x00);
}

TEST(Fp8Encode, AllZeroRowHasScaleZeroAndZeroCodes) {
  for (const std::vector<float>& x : {std::vector<float>{0.0f, -0.0f, 0.0f, 0.0f, 0.0f},
                                      std::vector<float>{1e-45f, -1e-45f, 0.0f, 0.0f, 0.0f}}) {  // amax / 448 underflows
    const auto out = encode(x);
    EXPECT_EQ(e4m3_row_scale_of(out.data(), 5), 0.0f);
    for (int c = 0; c < 5; ++c) EXPECT_EQ(out[c], 0x00) << c;
  }
}

TEST(Fp8Encode, NonFiniteRowsAreMarkedWithValueAndColumn) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto out = encode({1.0f, 2.0f, -inf, nan, 5.0f, 6.0f});
  EXPECT_TRUE(std::isinf(e4m3_row_scale_of(out.data(), 6)));
  EXPECT_GT(e4m3_row_scale_of(out.data(), 6), 0.0f);
  EXPECT_EQ(e4m3_row_bad_column(out.data(), 6), 2);
  out = encode({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, nan, inf});
  EXPECT_TRUE(std::isnan(e4m3_row_scale_of(out.data(), 7)));
  EXPECT_EQ(e4m3_row_bad_column(out.data(), 7), 5);
  for (int c = 4; c < 7; ++c) EXPECT_EQ(out[c], 0x00);
}

TEST(Fp8Encode, RoundTripErrorIsWithinHalfAnE4m3Step) {
  // Values over many binades: each decoded value is within 2^-4 (relative) of the input where
  // it is a normal e4m3 value, and within half a subnormal step (scale * 2^-10) below that.
  const int64_t H = 4096;
  std::vector<float> x = e3::test::random_floats(H, 31);
  for (int64_t i = 0; i < H; ++i) x[static_cast<size_t>(i)] *= std::ldexp(1.0f, static_cast<int>(i % 24) - 12);
  const auto out = encode(x);
  std::vector<float> y(static_cast<size_t>(H));
  decode_e4m3_row(out.data(), H, y.data());
  const float scale = e4m3_row_scale_of(out.data(), H);
  double num = 0, den = 0;
  for (int64_t i = 0; i < H; ++i) {
    const float a = std::fabs(x[static_cast<size_t>(i)]), err = std::fabs(y[static_cast<size_t>(i)] - x[static_cast<size_t>(i)]);
    const float bound = a / scale >= 0.015625f ? a * 0.0625f : scale * 0.0009765625f;
    EXPECT_LE(err, bound * 1.0001f) << i << " " << x[static_cast<size_t>(i)];
    num += static_cast<double>(err) * err;
    den += static_cast<double>(a) * a;
  }
  EXPECT_LT(std::sqrt(num / den), 0.0625);
}

}  // namespace
