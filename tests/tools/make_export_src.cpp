// make_export_src OUT [--hidden H] [--layers-total L] [--dtype bf16|fp16|fp32|fp8] [--samples N]
//                 [--tokens T] [--samples-per-shard S] [--vocab V] [--seed X] [--layers A,B,C]:
// a finished output directory (manifest.json and its shards, written by the production
// io::ShardWriter) of N samples of T..2T tokens each, the EAGLE-3 default layers of an L-layer
// model (or --layers) and --final both, without running a model: a multi-GB SRC for timing `export` and
// `verify` on this machine's disk, and the input of export's byte-identity check
// (tests/e2e/export_identity.sh). The states are rows of a pool of random rows, picked per
// sample, capture and token, so that every sample's bytes differ.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "core/storage_codec.h"
#include "io/manifest.h"
#include "io/shard_writer.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  fs::path out;
  int64_t hidden = 4096, layers_total = 32, samples = 8, tokens = 2048, per_shard = 4, vocab = 128256;
  uint64_t seed = 1;
  std::string dtype = "bf16";
  std::vector<int32_t> layers;  // empty: the EAGLE-3 default of --layers-total
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "make_export_src: %s\nusage: make_export_src OUT [--hidden H] [--layers-total L] [--dtype D] "
               "[--samples N] [--tokens T] [--samples-per-shard S] [--vocab V] [--seed X] [--layers A,B,C]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      o.out = a;
      continue;
    }
    if (i + 1 >= argc) usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--hidden") o.hidden = std::stoll(v);
    else if (a == "--layers-total") o.layers_total = std::stoll(v);
    else if (a == "--dtype") o.dtype = v;
    else if (a == "--samples") o.samples = std::stoll(v);
    else if (a == "--tokens") o.tokens = std::stoll(v);
    else if (a == "--samples-per-shard") o.per_shard = std::stoll(v);
    else if (a == "--vocab") o.vocab = std::stoll(v);
    else if (a == "--seed") o.seed = std::stoull(v);
    else if (a == "--layers")
      for (size_t at = 0; at < v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        o.layers.push_back(static_cast<int32_t>(std::stol(v.substr(at, comma - at))));
        at = comma + 1;
      }
    else usage("unknown option " + a);
  }
  if (o.out.empty()) usage("no OUT");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const e3::StorageCodec* codec = e3::storage_codec_named(o.dtype);
    if (!codec) usage("unknown --dtype " + o.dtype);
    fs::create_directories(o.out);
    e3::io::RunFingerprint fp;
    fp.model_fingerprint = fmt::format("make_export_src-{}", o.seed);
    const int32_t L = static_cast<int32_t>(o.layers_total);
    fp.layer_ids = o.layers.empty() ? std::vector<int32_t>{2, L / 2, L - 3} : o.layers;
    fp.final_mode = "both";
    fp.dtype = o.dtype;
    fp.max_seq_len = 1 << 20;
    fp.on_long = "skip";
    fp.samples_per_shard = o.per_shard;
    fp.shard_size = uint64_t{4} << 30;
    fp.plan_groups = 1;
    fp.tool_version = "make_export_src";
    e3::io::ModelAttributes model;
    model.model_type = "llama";
    model.hidden_size = o.hidden;
    model.num_hidden_layers = o.layers_total;
    model.model_path = "/nonexistent/make_export_src";
    model.config_fingerprint = "make_export_src";
    model.vocab_size = o.vocab;
    const e3::io::ShardAttributes attrs = e3::io::shard_attributes(fp, model);

    // A pool of encoded rows; a sample's row (k, t) is pool row hash(sample, k, t) % pool.
    constexpr size_t kPool = 1024;
    const size_t row_bytes = codec->row_bytes(o.hidden);
    std::vector<uint8_t> pool(kPool * row_bytes);
    {
      std::vector<float> x(kPool * static_cast<size_t>(o.hidden));
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int64_t>(e3::splitmix64(o.seed * 1000003 + i) % 20001) - 10000) / 2500.f;
      codec->encode(x.data(), kPool, o.hidden, pool.data());
    }
    const size_t K = fp.layer_ids.size(), finals = 2;
    e3::io::Manifest m;
    m.fingerprint = fp;
    m.model_path = model.model_path;
    m.data_path = "/nonexistent/make_export_src.jsonl";
    m.data_fingerprint = fmt::format("make_export_src-data-{}-{}", o.samples, o.seed);
    m.num_samples = o.samples;
    for (int64_t first = 0; first < o.samples; first += o.per_shard) m.shard_starts.push_back(first);
    m.num_shards = static_cast<int64_t>(m.shard_starts.size());
    std::vector<std::vector<uint8_t>> states(K + finals);
    for (int64_t shard = 0; shard < m.num_shards; ++shard) {
      e3::io::ShardWriter w(o.out, shard, attrs);
      for (int64_t s = shard * o.per_shard; s < std::min(o.samples, (shard + 1) * o.per_shard); ++s) {
        const int64_t T = o.tokens + static_cast<int64_t>(e3::splitmix64(o.seed + 7 * s) % static_cast<uint64_t>(o.tokens));
        std::vector<int32_t> ids(static_cast<size_t>(T));
        std::vector<uint8_t> mask(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) {
          ids[t] = static_cast<int32_t>(e3::splitmix64(o.seed * 31 + s * 100003 + t) % static_cast<uint64_t>(o.vocab));
          mask[t] = t >= T / 3 ? 1 : 0;
        }
        std::vector<const void*> layers, final_rows;
        for (size_t k = 0; k < K + finals; ++k) {
          states[k].resize(static_cast<size_t>(T) * row_bytes);
          for (int64_t t = 0; t < T; ++t) {
            const uint64_t r = e3::splitmix64((o.seed << 40) ^ (static_cast<uint64_t>(s) << 20) ^ (k << 16) ^ t) % kPool;
            std::copy_n(&pool[r * row_bytes], row_bytes, &states[k][static_cast<size_t>(t) * row_bytes]);
          }
          (k < K ? layers : final_rows).push_back(states[k].data());
        }
        const std::string id = fmt::format("sample-{}", s);
        w.write_sample(s, &id, ids, mask, layers, final_rows);
      }
      m.shards.push_back(w.commit());
    }
    m.complete = true;
    e3::io::write_manifest(o.out, m);
    uint64_t bytes = 0;
    for (const auto& c : m.shards) bytes += c.bytes;
    std::printf("make_export_src: %s: %lld samples in %lld shards, %.3f GB\n", o.out.c_str(),
                static_cast<long long>(o.samples), static_cast<long long>(m.num_shards), bytes / 1e9);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_export_src: %s\n", e.what());
    return 1;
  }
}
